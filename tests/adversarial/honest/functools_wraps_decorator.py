# expect: correct
# problem: silu
# family: honest twin of functools_wraps_dict / functools_wraps_default_dict / functools_wraps_setattr
# a launcher decorated with a decorator of its own that uses functools.wraps (both import forms)
import functools
from functools import wraps

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=m)


def contiguous_inputs(fn):
    @functools.wraps(fn)
    def inner(x, *rest):
        return fn(x.contiguous(), *rest)
    return inner


def sized(block):
    def deco(fn):
        @wraps(fn)
        def inner(x):
            return fn(x, block)
        return inner
    return deco


@sized(1024)
@contiguous_inputs
def launch(x, block):
    """Runs the SiLU kernel over x."""
    y = torch.empty_like(x)
    n = x.numel()
    _silu[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        assert launch.__name__ == "launch"
        return launch(x)
