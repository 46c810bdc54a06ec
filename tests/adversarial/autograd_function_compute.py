# expect: rejected guard|torch_compute
# problem: softmax
# family: 7 torch.autograd.Function
# honest: honest/autograd_function_own.py
# the candidate's own autograd.Function computes the softmax with operator.* in its forward
import functools
import math
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        e = operator.ipow(math.e, x)
        cols = e.unbind(-1)
        s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
        return operator.truediv(e, s.unsqueeze(-1))


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return _Fn.apply(x)
