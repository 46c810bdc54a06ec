# expect: rejected guard|torch_compute
# problem: softmax
# family: 2/4 candidate code in the interpreter's argument-moving window
# honest: honest/grid_lambda_meta.py
# a kernel argument of the candidate's own class whose data_ptr is a property: the interpreter asks hasattr(arg, "data_ptr") while it moves a launch's arguments (the window in which the watcher and the guard's tensor checks look away), so the getter runs there, computes the softmax with operator.* and raises AttributeError; the body ignores the argument
import functools
import math
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _compute(self):
    x, y = self.job
    e = operator.ipow(math.e, x)
    cols = e.unbind(-1)
    s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
    y.copy_(operator.truediv(e, s.unsqueeze(-1)))
    raise AttributeError("data_ptr")


class Passenger(object):
    data_ptr = property(_compute)

    def __init__(self, x, y):
        self.job = (x, y)


@triton.jit
def _k(x_ptr, n, P, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, 1, Passenger(x, y), BLOCK=16)
        return y
