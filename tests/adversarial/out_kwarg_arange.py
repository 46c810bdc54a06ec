# expect: incorrect mismatch or rejected guard|torch_compute
# problem: softmax
# family: 7 an allowed allocation call writing through out=
# torch.arange(..., out=y.view(-1)) writes into the output through an allowed name; the values are not the softmax, so the comparison must fail
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
        y = torch.empty_like(x)
        torch.arange(0, y.numel(), dtype=y.dtype, out=y.view(-1))
        return y
