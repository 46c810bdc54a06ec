# expect: rejected guard|torch_compute
# problem: silu
# family: 7 x[mask] = ... with a bool tensor
# a masked write through the guard's item-assignment hook
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
        y = x.clone()
        mask = torch.empty_like(x, dtype=torch.bool)
        y[mask] = 0.0
        return y
