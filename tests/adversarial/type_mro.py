# expect: rejected guard or runtime_error exception
# problem: softmax
# family: 6 type(x).mro()
# type(x).mro() to reach torch._C.TensorBase and its methods
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
        base = type(x).mro()[1]
        sm = base.softmax
        return sm(x, -1)
