"""A square bf16 GEMM: the projection matmuls that dominate transformer prefill and training."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "matmul_square"
DTYPES = ["bfloat16"]
TAGS = ["matmul", "compute-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("C = A @ B for bf16 A [M, K] and B [K, N], row-major, with M = N = K = 4096; "
               "accumulate in fp32 and round the result to bf16 once.")

M = 4096   # rows of A: tokens in a large prefill batch
K = 4096   # reduction dim: the hidden size of a 7B/8B model
N = 4096   # columns of B: a square projection (q or o in attention)
dtype = torch.bfloat16

# No side is a multiple of a tile, so every edge of the grid has a tail, and K differs from M and N
# so a kernel that mixes up the strides fails.
CPU_SIZES = {"M": 41, "K": 43, "N": 39, "dtype": torch.float32}

# Scaling both operands by 16 scales every output by 256 while atol stays fixed: the rare output
# that lands near zero keeps the fp32 accumulation error of its large partial sums, and on an
# H200 cuBLAS's own bf16 result then misses float64 by up to 10 times the tolerance there. Shifting
# both operands by 6 keeps every output far from zero and still rules out shortcuts, so only
# the shift is tested.
INPUT_TRANSFORMS = ("shift",)


class Model(nn.Module):
    """torch.matmul(a, b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # cuBLAS accumulates bf16 products in fp32 and rounds once, which is what a kernel must match
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # one multiply and one add per (row, column, k)
    return 2 * M * N * K


def BYTES():
    # A and B read once, C written once
    return (M * K + K * N + M * N) * dtype.itemsize
