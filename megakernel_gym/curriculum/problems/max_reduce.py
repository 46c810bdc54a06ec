"""Row-wise max over the hidden dim, the statistic behind softmax stabilisation and per-token fp8 scales."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "max_reduce"
DTYPES = ["bfloat16"]
TAGS = ["reduction", "memory-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("out = x.amax(dim=-1) for bf16 x [batch_size, dim] = [8192, 4096] -> [8192]: the maximum of each "
               "contiguous row (values only, no indices; exact, so any reduction order gives the same answer).")

batch_size = 8192  # tokens
dim = 4096         # hidden size
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 113, "dim": 31, "dtype": torch.float32}


class Model(nn.Module):
    """torch.amax(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # one comparison per input element
    return batch_size * dim


def BYTES():
    return (batch_size * dim + batch_size) * dtype.itemsize
