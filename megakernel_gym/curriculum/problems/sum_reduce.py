"""Sum over the sequence axis of [batch, seq, hidden] states, as in mean-pooling a sentence encoder's tokens."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "sum_reduce"
DTYPES = ["float32"]
TAGS = ["reduction", "memory-bound", "fp32"]
SPLIT = "heldout"
DESCRIPTION = ("out = x.sum(dim=1) for fp32 x [batch_size, seq_len, hidden] = [8, 2048, 1024] -> [8, 1024]: "
               "a reduction over the middle (strided) axis, accumulated in fp32.")

batch_size = 8   # sequences
seq_len = 2048   # tokens summed per sequence (the reduced axis)
hidden = 1024    # features kept (a BERT-large / bge-large width)
dtype = torch.float32

CPU_SIZES = {"batch_size": 4, "seq_len": 29, "hidden": 31}

# An fp32 sum of 2048 terms carries rounding of about 1e-7 times the running partial sums, not
# times the result: a column whose sum lands near zero keeps the error of its large partials.
# With inputs scaled by 16 (the worst transform), a one-thread-per-column sequential fp32 loop
# errs by up to 6e-3 against float64 and even torch's CPU sum by 4e-4, so the fp32 default atol
# of 1e-4 would fail honest kernels. With 5e-3 the sequential loop uses a quarter of the
# tolerance against the reference (measured on an H200), while a bf16 accumulator (errors ~0.1) fails.
ATOL = 5e-3


class Model(nn.Module):
    """x.sum(dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # one add per input element
    return batch_size * seq_len * hidden


def BYTES():
    return (batch_size * seq_len * hidden + batch_size * hidden) * dtype.itemsize
