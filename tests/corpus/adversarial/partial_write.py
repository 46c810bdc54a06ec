# expect: incorrect mismatch
# problem: softmax
# writes only the first half of the output; the rest stays as the judge poison (NaN)
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
        n = x.numel() // 2
        _copy[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y