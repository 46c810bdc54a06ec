"""MoE router: token-to-expert logits from one GEMM, softmaxed over the experts (Qwen3-MoE / DeepSeek style)."""
import torch
import torch.nn as nn

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "matmul_softmax"
DTYPES = ["bfloat16"]
DESCRIPTION = ("p = softmax(x @ W^T, dim=-1) for bf16 x [batch_size, hidden] and router weight W "
               "[num_experts, hidden]; logits and softmax in fp32, output fp32 [batch_size, num_experts].")
TAGS = ["matmul", "memory-bound", "bf16", "fused", "reduction", "moe"]
SPLIT = "train"

batch_size = 8192   # tokens routed together
hidden = 4096       # model width (Qwen3-235B-A22B)
num_experts = 128   # a whole row of logits fits one output tile, so the softmax can live in the epilogue
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 19, "hidden": 36, "num_experts": 23, "dtype": torch.float32}


class Model(nn.Module):
    """softmax over experts of fp32 router logits (routers upcast: a bf16 rounding of the logits would
    move every probability by up to a percent)."""

    def __init__(self, hidden: int, num_experts: int, dtype: torch.dtype):
        super().__init__()
        self.gate = nn.Linear(hidden, num_experts, bias=False, dtype=dtype)
        # unit-variance logits: a spread of probabilities rather than a near-uniform row
        with torch.no_grad():
            self.gate.weight.normal_(0.0, hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = _matmul_fp32(x, self.gate.weight)
        return torch.softmax(logits, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, num_experts, dtype]


def FLOPS():
    # the product, then ~5 per logit for the softmax (max, subtract, exp, sum, scale)
    return 2 * batch_size * hidden * num_experts + 5 * batch_size * num_experts


def BYTES():
    # x and W read once in bf16, fp32 probabilities written once
    return (batch_size * hidden + num_experts * hidden) * dtype.itemsize + batch_size * num_experts * 4
