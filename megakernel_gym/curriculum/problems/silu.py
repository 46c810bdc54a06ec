"""SiLU (swish), the gate activation inside the SwiGLU MLPs of Llama, Mistral and Qwen."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "silu"
DTYPES = ["float32"]
TAGS = ["elementwise", "memory-bound", "fp32"]
SPLIT = "heldout"
DESCRIPTION = "y = x * sigmoid(x) elementwise on fp32 MLP gate activations [batch_size, dim] = [1024, 8192]."

batch_size = 1024  # tokens
dim = 8192         # MLP width of Llama-3.2-1B
dtype = torch.float32

CPU_SIZES = {"batch_size": 11, "dim": 317}


class Model(nn.Module):
    """F.silu(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # per element: negate, exp, add 1, divide, multiply by x
    return 5 * batch_size * dim


def BYTES():
    return 2 * batch_size * dim * dtype.itemsize
