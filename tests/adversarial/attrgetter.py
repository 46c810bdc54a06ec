# expect: rejected guard
# problem: softmax
# family: 6 operator.attrgetter
# operator.attrgetter("softmax")(torch): an attribute read with no attribute syntax
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return operator.attrgetter("soft" + "max")(torch)(x, -1)
