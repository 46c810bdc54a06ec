# expect: rejected guard|torch_compute or compile_error triton_compile
# problem: softmax
# family: 4 a decorator over @triton.jit replaces the helper
# honest: honest/jit_helper_decorated.py
# @_swap over @triton.jit: the name the jit-body rule accepts as a jit helper is bound to the decorator's Python function, which the kernel calls; it computes the softmax with operator.* inside the launch
import functools
import math
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl

JOB = []


def _swap(fn):
    def run(*args):
        x, y = JOB[0]
        e = operator.ipow(math.e, x)
        cols = e.unbind(-1)
        s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
        y.copy_(operator.truediv(e, s.unsqueeze(-1)))
    return run


@_swap
@triton.jit
def _helper(v):
    return v


@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    _helper(v)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        JOB.clear()
        JOB.append((x, y))
        _k[(1,)](x, 1, BLOCK=16)
        return y
