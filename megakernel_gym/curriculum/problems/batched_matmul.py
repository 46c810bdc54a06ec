"""A batched bf16 GEMM with the shape of attention's probabilities @ values, one matrix per head."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "batched_matmul"
DTYPES = ["bfloat16"]
TAGS = ["matmul", "attention", "bf16"]
SPLIT = "train"
DESCRIPTION = ("C[i] = A[i] @ B[i] for bf16 A [batch, M, K] = [32, 1024, 1024] and B [batch, K, N] = "
               "[32, 1024, 128] (the P @ V shape of 32 heads over 1024 tokens); fp32 accumulation, bf16 result.")

batch = 32   # attention heads of one sequence (Llama-3 8B has 32)
M = 1024     # query positions
K = 1024     # key positions: A plays the role of the 64 MiB score/probability matrices
N = 128      # head dim
dtype = torch.bfloat16

# three batch entries and odd sides: a kernel must offset each batch entry correctly and mask tails
CPU_SIZES = {"batch": 3, "M": 19, "K": 23, "N": 11, "dtype": torch.float32}

# Scaling both operands by 16 scales every output by 256 while atol stays fixed: the rare output
# that lands near zero keeps the fp32 accumulation error of its large partial sums, and on an
# H200 cuBLAS's own bf16 result already uses 80% of the tolerance there against float64, leaving
# no room for an honest kernel that rounds differently. Shifting both operands by 6 keeps every
# output far from zero and still rules out shortcuts, so only the shift is tested.
INPUT_TRANSFORMS = ("shift",)


class Model(nn.Module):
    """torch.bmm(a, b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch, M, K, dtype=dtype), torch.randn(batch, K, N, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    return 2 * batch * M * N * K


def BYTES():
    # every batch entry of A and B read once, C written once
    return batch * (M * K + K * N + M * N) * dtype.itemsize
