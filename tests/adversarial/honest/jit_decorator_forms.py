# expect: correct
# problem: softmax
# family: honest twin of decorated_jit_wrapper (Triton's own decorator forms)
# `from triton import jit` and @jit(do_not_specialize=[...]), a jit helper, a tl.constexpr default
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton import jit


@jit
def _row_max(x):
    return tl.max(x, axis=0)


@jit(do_not_specialize=["n_cols"])
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr = 16):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - _row_max(x))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
