# expect: rejected guard
# problem: softmax
# a kernel runs, but the math is torch arithmetic on tensors (seen only dynamically)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _copy[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y / (y + 1.0)