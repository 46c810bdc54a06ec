# expect: rejected guard
# problem: softmax
# an nn.Softmax layer built in __init__ and called in forward (constructing is allowed, running is not)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.sm = nn.Softmax(dim=-1)

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _copy[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return self.sm(y)