# expect: rejected guard
# problem: softmax
# family: 4 interpreter internals: .handle.data
# x_ptr.handle.data is the numpy buffer under the interpreter's pointer; numpy does the softmax
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = x_ptr.handle.data
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
        return y
