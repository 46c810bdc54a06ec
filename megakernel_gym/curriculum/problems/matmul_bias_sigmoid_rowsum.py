"""Sum over features of sigmoid(x W^T + b): the expected number of open gates per token in a sigmoid-gated layer."""
import torch
import torch.nn as nn

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "matmul_bias_sigmoid_rowsum"
DTYPES = ["bfloat16"]
DESCRIPTION = ("s[i] = sum_j sigmoid(x @ W^T + b)[i, j] for bf16 x [batch_size, in_features], W [out_features, "
               "in_features], b [out_features]; sigmoid and sum in fp32, s [batch_size] in fp32.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "reduction"]
SPLIT = "train"

batch_size = 4096    # tokens
in_features = 4096   # hidden size
out_features = 8192  # gates per token; the [batch_size, out_features] activations never need to exist
dtype = torch.bfloat16

# 103 rows: the output has one element per row
CPU_SIZES = {"batch_size": 103, "in_features": 20, "out_features": 30, "dtype": torch.float32}


class Model(nn.Module):
    """GEMM + bias, then sigmoid and a row sum, all in fp32."""

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        with torch.no_grad():
            # With independent weights every row would sum to ~out_features/2 within a fraction of a
            # percent, and a constant would pass. Trained gates share a direction: adding one common
            # vector to all rows of W spreads the per-token sums over most of [0, out_features].
            shared = torch.randn(in_features, dtype=dtype) * (1.5 * in_features ** -0.5)
            self.linear.weight.add_(shared)
            # gate biases sit below zero (closed by default); the mean makes dropping b visible at any size
            self.linear.bias.normal_(-1.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _matmul_fp32(x, self.linear.weight)
        y = y + self.linear.bias.to(y.dtype)
        return torch.sigmoid(y).sum(dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, dtype]


def FLOPS():
    # the product, then per pre-activation: bias add, ~3 for the sigmoid, 1 to accumulate
    return 2 * batch_size * in_features * out_features + 5 * batch_size * out_features


def BYTES():
    # x, W, b read once; only the fp32 sums are written
    return (batch_size * in_features + out_features * in_features + out_features) * dtype.itemsize + batch_size * 4
