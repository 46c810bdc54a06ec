"""Per-token cross-entropy of LLM logits against the next tokens: the training loss before its mean."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "cross_entropy"
DTYPES = ["float32"]
TAGS = ["reduction", "memory-bound", "fp32"]
SPLIT = "train"
DESCRIPTION = ("loss[i] = logsumexp(logits[i]) - logits[i, targets[i]] for fp32 logits [num_tokens, vocab] = "
               "[512, 32000] and int64 targets [num_tokens] in [0, vocab) (F.cross_entropy, reduction='none').")

num_tokens = 512  # tokens in a training micro-batch
vocab = 32000     # Llama-2 vocabulary; logits are 62.5 MiB
dtype = torch.float32

# 103 rows of 37 logits: the loss vector is long enough to test, and 37 is no block size
CPU_SIZES = {"num_tokens": 103, "vocab": 37}


class Model(nn.Module):
    """F.cross_entropy(logits, targets, reduction="none")."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    logits = torch.randn(num_tokens, vocab, dtype=dtype)
    targets = torch.randint(0, vocab, (num_tokens,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []


def FLOPS():
    # per logit: max comparison, subtract, exp, add into the sum; per token: a log and a subtract
    return 4 * num_tokens * vocab + 2 * num_tokens


def BYTES():
    # logits and targets read once (the target logit is re-read, but within its row), losses written once
    return num_tokens * vocab * dtype.itemsize + num_tokens * 8 + num_tokens * dtype.itemsize
