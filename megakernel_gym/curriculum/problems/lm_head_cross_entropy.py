"""LM head + per-token cross entropy: the loss of LLM training, fused so the [tokens, vocab] logits never reach HBM."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "lm_head_cross_entropy"
DTYPES = ["bfloat16"]
DESCRIPTION = ("loss[i] = logsumexp(l[i]) - l[i, targets[i]] with logits l = h @ W^T for bf16 h [num_tokens, "
               "hidden], W [vocab_size, hidden] and int64 targets [num_tokens] in [0, vocab_size); logits and "
               "loss in fp32 (no reduction, no ignore index), loss [num_tokens] fp32.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "reduction"]
SPLIT = "train"

num_tokens = 4096    # tokens in a training micro-batch
hidden = 4096        # Llama-3 8B
vocab_size = 128256  # Llama-3 vocabulary; W is 1 GiB in bf16 and fp32 logits would be 2 GiB
dtype = torch.bfloat16

# 101 tokens: the output has one element per token
CPU_SIZES = {"num_tokens": 101, "hidden": 24, "vocab_size": 211, "dtype": torch.float32}


class Model(nn.Module):
    """cross_entropy(h @ W^T, targets, reduction="none") on unrounded fp32 logits."""

    def __init__(self, hidden: int, vocab_size: int, dtype: torch.dtype):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False, dtype=dtype)

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = _matmul_fp32(h, self.lm_head.weight)
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    h = torch.randn(num_tokens, hidden, dtype=dtype)
    targets = torch.randint(0, vocab_size, (num_tokens,), dtype=torch.int64)
    return [h, targets]


def get_init_inputs():
    return [hidden, vocab_size, dtype]


def FLOPS():
    # the product, then ~4 per logit for the online logsumexp (max, subtract, exp, add)
    return 2 * num_tokens * hidden * vocab_size + 4 * num_tokens * vocab_size


def BYTES():
    # h and W read once, targets (int64) read once, fp32 losses written once
    return (num_tokens * hidden + vocab_size * hidden) * dtype.itemsize + num_tokens * (8 + 4)
