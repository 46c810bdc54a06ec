# expect: correct
# problem: softmax
# family: honest twin of grid_lambda_torch_compute / sum_of_scalar_list (operator and functools on Python ints only)
# functools.reduce(operator.mul, shape), iteration over x.shape, int()/float() of Python numbers, lru_cache
import functools
import operator

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


@functools.lru_cache(maxsize=None)
def _block(cols: int) -> int:
    return max(16, triton.next_power_of_2(cols))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        dims = [int(d) for d in x.shape]
        n = functools.reduce(operator.mul, dims, 1)
        assert n == x.numel() and float(n) > 0
        cols = dims[-1]
        rows = n // cols
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(rows,)](x, y, cols, BLOCK=_block(cols))
        return y
