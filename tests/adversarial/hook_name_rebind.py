# expect: rejected guard
# problem: softmax
# family: 6 rebinding the guard's hook names
# a parameter named _getattr_ (with a default of the builtin getattr's replacement) shadows the hook inside the function
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def _raw_getattr(obj, name):
    return obj


def _fetch(obj, _getattr_=_raw_getattr):
    return obj.softmax


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return _fetch(torch)(x, -1)
