"""Linear layer, GroupNorm over channel groups, then a hardtanh clamp: a normalized, bounded feature layer."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "gemm_groupnorm_hardtanh"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = clamp(groupnorm(x @ W^T + b), -1.0, 1.5) for bf16 x [batch_size, in_features], W "
               "[out_features, in_features], b [out_features]; GroupNorm (eps=1e-5, affine) normalizes each "
               "row's num_groups contiguous channel groups of out_features/num_groups.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "norm", "reduction"]
SPLIT = "train"

batch_size = 8192    # rows (tokens / samples)
in_features = 2048
out_features = 4096
num_groups = 32      # 128 channels per group: one group per 128-wide output tile
eps = 1e-5
min_val = -1.0       # asymmetric, so a kernel cannot assume hardtanh's default +-1
max_val = 1.5
dtype = torch.bfloat16

# 5 groups of 12 channels
CPU_SIZES = {"batch_size": 23, "in_features": 36, "out_features": 60, "num_groups": 5, "dtype": torch.float32}


class Model(nn.Module):
    """GEMM, GroupNorm and the clamp, all in fp32."""

    def __init__(self, in_features: int, out_features: int, num_groups: int, eps: float, min_val: float,
                 max_val: float, dtype: torch.dtype):
        super().__init__()
        self.num_groups = num_groups
        self.eps = eps
        self.clamp = (min_val, max_val)
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        self.gn_weight = nn.Parameter(torch.empty(out_features, dtype=dtype))
        self.gn_bias = nn.Parameter(torch.empty(out_features, dtype=dtype))
        # the linear bias varies within a group, so GroupNorm does not cancel it; made wide enough
        # to matter, and the affine parameters moved off 1/0
        with torch.no_grad():
            self.linear.bias.uniform_(-0.5, 0.5)
            self.gn_weight.normal_(1.0, 0.25)
            self.gn_bias.normal_(0.0, 0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _matmul_fp32(x, self.linear.weight)
        y = y + self.linear.bias.to(y.dtype)
        y = F.group_norm(y, self.num_groups, self.gn_weight.to(y.dtype), self.gn_bias.to(y.dtype), self.eps)
        # about 16% of values fall below -1 and 7% above 1.5
        return F.hardtanh(y, *self.clamp).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, num_groups, eps, min_val, max_val, dtype]


def FLOPS():
    # the product, then per output: bias add, ~7 for the group norm with its affine, 2 for the clamp
    return 2 * batch_size * in_features * out_features + 10 * batch_size * out_features


def BYTES():
    return (batch_size * in_features + out_features * in_features + 3 * out_features
            + batch_size * out_features) * dtype.itemsize
