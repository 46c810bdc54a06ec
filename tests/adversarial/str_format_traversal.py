# expect: rejected guard
# problem: softmax
# family: 6 str.format attribute traversal
# "{0.utils._python_dispatch}" .format(torch): format fields walk attributes with no attribute syntax
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
        name = "{0.softmax.__name__}".format(torch)
        return x
