# expect: rejected guard
# problem: softmax
# family: 6 typing.get_type_hints evaluates string annotations
# a function annotation written as a string is evaluated by typing.get_type_hints with plain eval (no guard hooks) in the module's globals
from __future__ import annotations
import typing
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

T = torch


def _carrier(x: T.utils._python_dispatch._disable_current_modes) -> T.softmax:
    return x


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        hints = typing.get_type_hints(_carrier)
        with hints["x"]():
            return hints["return"](x, -1)
