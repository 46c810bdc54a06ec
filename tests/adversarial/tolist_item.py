# expect: rejected guard
# problem: softmax
# family: 3 host compute: tolist/item
# x.tolist() and .item() to compute the softmax in Python
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
        data = x.tolist()
        out = []
        for row in data:
            m = max(row)
            e = [math.exp(v - m) for v in row]
            out.append([v / sum(e) for v in e])
        _touch[(1,)](x, 1, BLOCK=16)
        return torch.tensor(out, dtype=x.dtype, device=x.device)
