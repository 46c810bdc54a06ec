"""A linear layer followed by ReLU, the classic GEMM-with-epilogue fusion."""
import torch
import torch.nn as nn

LEVEL = 2
OP_TYPE = "matmul_bias_relu"
DTYPES = ["bfloat16"]
TAGS = ["matmul", "compute-bound", "fused", "bf16"]
SPLIT = "train"
DESCRIPTION = "y = relu(x @ W^T + b) for bf16 x [batch_size, in_features], W [out_features, in_features] (an MLP up-projection)."

batch_size = 2048    # tokens
in_features = 4096   # hidden size
out_features = 8192  # MLP width; W is 64 MiB in bf16
dtype = torch.bfloat16

# 33, 40 and 48 are not multiples of the usual 16/32/64 tiles.
CPU_SIZES = {"batch_size": 33, "in_features": 48, "out_features": 40, "dtype": torch.float32}

# The production kernel this problem is timed against (issue 43): cuBLASLt's GEMM with the bias and ReLU fused
# into its epilogue (torch._addmm_activation), one kernel where eager runs two.
PRODUCTION = {"cublaslt_relu_epilogue": "torch._addmm_activation: cuBLASLt GEMM, bias and ReLU in its epilogue"}


class Model(nn.Module):
    """relu(linear(x))."""

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        # nn.Linear's default bias is within +-1/sqrt(in_features), small enough to drop
        # unnoticed at bf16 tolerance; a wider bias makes the epilogue add matter.
        with torch.no_grad():
            self.linear.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, dtype]


def production_baselines(model):
    w, b = model.linear.weight, model.linear.bias
    return {"cublaslt_relu_epilogue": lambda x: torch._addmm_activation(b, x, w.t())}


def FLOPS():
    # the product, then a bias add and a max per output element
    return 2 * batch_size * in_features * out_features + 2 * batch_size * out_features


def BYTES():
    return (batch_size * in_features + out_features * in_features + out_features
            + batch_size * out_features) * dtype.itemsize
