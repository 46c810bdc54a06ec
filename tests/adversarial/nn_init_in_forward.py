# expect: rejected guard
# problem: silu
# family: 7 torch.nn.init in forward
# honest: honest/parameter_randn_init.py
# nn.init.constant_ / uniform_ in forward (allowed in __init__)
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
        nn.init.constant_(y, 0.0)
        return y
