"""A tall-skinny bf16 GEMM: many tokens projected onto a few columns, like an MoE router or a LoRA down-projection."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "matmul_tall_skinny"
DTYPES = ["bfloat16"]
TAGS = ["matmul", "memory-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("C = A @ B for bf16 A [M, K] = [16384, 1024] and B [K, N] = [1024, 64]: reading A dominates, "
               "so the output tiles must be narrow and A streamed once; fp32 accumulation, bf16 result.")

M = 16384  # tokens (a long prefill or a big training micro-batch); A is 32 MiB
K = 1024   # hidden size of a small model
N = 64     # few output columns: 64 experts to route to, or a rank-64 adapter
dtype = torch.bfloat16

CPU_SIZES = {"M": 67, "K": 41, "N": 13, "dtype": torch.float32}

# Scaling both operands by 16 scales every output by 256 while atol stays fixed: the rare output
# that lands near zero keeps the fp32 accumulation error of its large partial sums, and on an
# H200 cuBLAS's own bf16 result then misses float64 by up to 1.1 times the tolerance there. Shifting
# both operands by 6 keeps every output far from zero and still rules out shortcuts, so only
# the shift is tested.
INPUT_TRANSFORMS = ("shift",)


class Model(nn.Module):
    """torch.matmul(a, b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    return 2 * M * N * K


def BYTES():
    # A read once (the bulk), the small B read once, C written once
    return (M * K + K * N + M * N) * dtype.itemsize
