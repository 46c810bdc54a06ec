# expect: rejected guard
# problem: softmax
# a tensor subclass that could defer or fake its values
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y.as_subclass(Lazy)