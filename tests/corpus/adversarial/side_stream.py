# expect: rejected concurrency
# problem: softmax
# work on a side stream escapes the timed events
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
        self.s = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        with torch.cuda.stream(self.s):
            _copy[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y