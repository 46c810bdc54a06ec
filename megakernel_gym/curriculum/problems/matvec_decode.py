"""The bf16 GEMV of LLM decoding: a few tokens through an MLP up-projection, bound by reading the weight."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "matvec_decode"
DTYPES = ["bfloat16"]
TAGS = ["matmul", "decode", "memory-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("y = x @ W^T for bf16 x [batch_size, in_features] = [4, 4096] and a weight W [14336, 4096] held "
               "by the model (Llama-3 8B's MLP up-projection); streaming the 112 MiB weight once is the whole cost.")

batch_size = 4        # sequences decoding one token each
in_features = 4096    # hidden size
out_features = 14336  # MLP width of Llama-3 8B
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 3, "in_features": 45, "out_features": 67, "dtype": torch.float32}


class Model(nn.Module):
    """nn.Linear without bias."""

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        # nn.Linear's default init (uniform, bound 1/sqrt(in_features)) already gives outputs of order one
        self.proj = nn.Linear(in_features, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=dtype)]


def get_init_inputs():
    return [in_features, out_features, dtype]


def FLOPS():
    return 2 * batch_size * in_features * out_features


def BYTES():
    # the weight read once (shared by all tokens), x read once, y written once
    return (out_features * in_features + batch_size * in_features + batch_size * out_features) * dtype.itemsize
