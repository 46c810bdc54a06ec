"""Linear layer + tanh-approximate GELU: the MLP up-projection of GPT-2/GPT-J-style transformers."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "matmul_gelu"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = gelu_tanh(x @ W^T + b) for bf16 x [batch_size, in_features], W [out_features, in_features], "
               "b [out_features] (GPT-J MLP up-projection, 4096 -> 16384); GELU uses the tanh approximation.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "elementwise"]
SPLIT = "train"

batch_size = 4096     # tokens in a prefill chunk
in_features = 4096    # hidden size (GPT-J 6B)
out_features = 16384  # MLP width, 4x hidden; W is 128 MiB in bf16
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 37, "in_features": 52, "out_features": 45, "dtype": torch.float32}

# The production kernels this problem is timed against (issue 43): cuBLASLt's GEMM with the bias and tanh-GELU
# fused into its epilogue (torch._addmm_activation), and the plain bf16 layer a model would run (F.linear, then
# F.gelu) in two kernels.
PRODUCTION = {"cublaslt_gelu_epilogue": "torch._addmm_activation: cuBLASLt GEMM, bias and GELU in its epilogue",
              "linear_gelu_bf16": "F.linear then F.gelu(approximate='tanh'), bf16, as a model runs the layer"}


class Model(nn.Module):
    """gelu(linear(x), approximate="tanh"), the GELU evaluated in fp32 on the unrounded GEMM result."""

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        # the default bias (+-1/sqrt(in_features)) is too small to notice at bf16 tolerance
        with torch.no_grad():
            self.linear.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _matmul_fp32(x, self.linear.weight)
        y = y + self.linear.bias.to(y.dtype)
        return F.gelu(y, approximate="tanh").to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, dtype]


def production_baselines(model):
    w, b = model.linear.weight, model.linear.bias
    return {"cublaslt_gelu_epilogue": lambda x: torch._addmm_activation(b, x, w.t(), use_gelu=True),
            "linear_gelu_bf16": lambda x: F.gelu(F.linear(x, w, b), approximate="tanh")}


def FLOPS():
    # the product, then per output: bias add plus ~8 for the tanh-GELU (cube, fma, tanh, scale)
    return 2 * batch_size * in_features * out_features + 9 * batch_size * out_features


def BYTES():
    return (batch_size * in_features + out_features * in_features + out_features
            + batch_size * out_features) * dtype.itemsize
