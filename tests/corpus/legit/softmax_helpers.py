# expect: correct
# problem: softmax
# legit style variety: a helper function, math in Python, triton.heuristics, reshape/view, tuple unpacking
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.heuristics({"EVEN": lambda args: args["n_cols"] % args["BLOCK"] == 0})
@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def _block_for(n: int) -> int:
    return 1 << math.ceil(math.log2(max(n, 16)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        flat = x.contiguous().view(rows, cols)
        y = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
        _softmax[(rows,)](flat, y, cols, BLOCK=_block_for(cols))
        return y.reshape(rows, cols)
