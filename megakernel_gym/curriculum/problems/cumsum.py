"""Inclusive prefix sum along a long axis, as in top-p sampling over a vocabulary or the decay sums of linear-attention/SSM layers."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "cumsum"
DTYPES = ["float32"]
TAGS = ["scan", "reduction", "memory-bound", "fp32"]
SPLIT = "train"
DESCRIPTION = ("out = torch.cumsum(x, dim=-1) for fp32 x [batch_size, length] = [256, 32768]: an inclusive scan "
               "of each 32K-long row, so a row spans many blocks and the running total must be carried across them.")

batch_size = 256  # independent rows
length = 32768    # scanned axis: a 32K context
dtype = torch.float32

CPU_SIZES = {"batch_size": 7, "length": 499}

# Calibrated against float64 and against torch's GPU scan at the GPU shape, all five input
# transforms. A prefix sum's rounding error grows with the running total along the row, not with
# the output at that position: where a random-walk row crosses zero late, the output is ~0 but
# carries the error of partials ~100x larger. With inputs scaled by 16, a one-thread-per-row
# sequential fp32 scan (slow but honest) errs by up to 5.4e-2 absolute, a blocked scan with a
# carried fp32 total by 5.5e-3. With atol 5e-2 they use about a third and 6% of the tolerance
# against the reference (measured on an H200); the relative part stays at the fp32 1e-4, which the
# shifted inputs (totals near 2e5) need. A bf16 accumulator (errors ~1) or a dropped carry fails.
ATOL = 5e-2
RTOL = 1e-4


class Model(nn.Module):
    """torch.cumsum(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, length, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # one add per element (a work-efficient scan does about two; count the useful one)
    return batch_size * length


def BYTES():
    return 2 * batch_size * length * dtype.itemsize
