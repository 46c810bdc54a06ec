# expect: incorrect mismatch
# problem: softmax
# output of the wrong shape
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
        y = torch.empty(x.shape[0], x.shape[1] + 1, device=x.device, dtype=x.dtype)
        _copy[(triton.cdiv(y.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y