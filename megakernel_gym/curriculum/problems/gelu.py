"""Exact (erf) GELU, the MLP activation of BERT, ViT and GPT-style transformers."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "gelu"
DTYPES = ["bfloat16"]
TAGS = ["elementwise", "memory-bound", "bf16"]
SPLIT = "heldout"
DESCRIPTION = ("y = 0.5 * x * (1 + erf(x / sqrt(2))) elementwise on bf16 MLP activations [batch_size, dim] = "
               "[2048, 8192], math in fp32 (not the tanh approximation).")

batch_size = 2048  # tokens in a prefill chunk
dim = 8192         # MLP width of a 2048-hidden model (4x expansion)
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 13, "dim": 300, "dtype": torch.float32}


class Model(nn.Module):
    """F.gelu(x) with the exact erf form."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # PyTorch evaluates bf16 gelu in fp32 and rounds once
        return torch.nn.functional.gelu(x, approximate="none")


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # per element: scale by 1/sqrt(2), erf (counted as one), add 1, multiply by x, halve
    return 5 * batch_size * dim


def BYTES():
    return 2 * batch_size * dim * dtype.itemsize
