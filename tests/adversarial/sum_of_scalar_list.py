# expect: rejected torch_compute|guard
# problem: softmax
# family: 3 builtins on lists of 0-d tensors
# sum()/max() refuse a tensor argument but not a list of 0-d tensors: list(row) slips past the check and the builtins then do tensor arithmetic
import math
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
        y = torch.empty_like(x)
        for i, row in enumerate(x):
            items = list(row)
            m = max(items)
            e = [math.exp(v - m) for v in items]
            s = sum(e)
            y[i] = torch.tensor([v / s for v in e], dtype=x.dtype)
        _touch[(1,)](x, 1, BLOCK=16)
        return y
