# expect: rejected guard|introspection
# problem: softmax
# family: 6 __init_subclass__, descriptors, __class_getitem__
# defines __init_subclass__, __get__ and __class_getitem__, hooks Python calls with no attribute syntax
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


class Sneaky(object):
    def __init_subclass__(cls, **kw):
        pass

    def __get__(self, obj, owner=None):
        return obj

    def __class_getitem__(cls, item):
        return item


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
