# expect: rejected guard
# problem: softmax
# family: 6 class attributes of torch's classes
# torch.Tensor.softmax read off the class (no call on the path, so no static finding), called on x
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

SM = torch.Tensor.softmax


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return SM(x, -1)
