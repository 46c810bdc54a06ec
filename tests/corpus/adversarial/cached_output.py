# expect: incorrect mismatch
# problem: softmax
# remembers the first output and serves it again: right on one seed, wrong on the rest
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
        self.cache = []

    def forward(self, x):
        if self.cache:
            return self.cache[0].clone()
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        self.cache.append(y)
        return y