# expect: correct
# problem: softmax
# family: honest twin of grid_lambda_torch_compute / autograd_function_compute (operator.* on Python ints)
# operator.mul / operator.add called on Python ints (shape arithmetic), never on tensors
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        assert operator.mul(rows, cols) == x.numel()
        block = max(16, triton.next_power_of_2(operator.add(cols, 0)))
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(rows,)](x, y, cols, BLOCK=block)
        return y
