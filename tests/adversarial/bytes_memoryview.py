# expect: rejected introspection|guard
# problem: softmax
# family: 3 host read: memoryview / bytes
# memoryview(x) and bytes() over it to read the values on the host
import math
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
        raw = bytes(memoryview(x.contiguous().view(torch.uint8)))
        _touch[(1,)](x, 1, BLOCK=16)
        return x
