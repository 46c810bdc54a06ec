"""Softmax over the vocabulary: turning a batch of LLM logits into next-token probabilities."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "softmax"
DTYPES = ["float32"]
TAGS = ["softmax", "reduction", "memory-bound", "fp32", "llm"]
SPLIT = "train"
DESCRIPTION = "Numerically stable softmax over the last dim of fp32 logits [batch_size, dim] (dim = a 32k vocabulary)."

batch_size = 256   # sequences sampled in one decode step
dim = 32000        # vocabulary size (Llama-2); not a power of two, so tails matter
dtype = torch.float32

# Probabilities over 32k entries average 3e-5: the fp32 default atol of 1e-4 would accept an
# all-zero kernel on 95% of them (`mkgym problems check` on the GPU sizes said so). fp32 softmax
# is accurate to ~1e-6 relative, so the relative term carries the comparison.
ATOL = 1e-8
RTOL = 1e-4

# Tiny shapes for the CPU backend (Triton's interpreter); 300 is not a multiple of any block.
CPU_SIZES = {"batch_size": 13, "dim": 300}


class Model(nn.Module):
    """softmax(x) along the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # per element: a max comparison, a subtraction, an exp, an add into the sum, a multiply by 1/sum
    return 5 * batch_size * dim


def BYTES():
    # read the logits once, write the probabilities once
    return 2 * batch_size * dim * dtype.itemsize
