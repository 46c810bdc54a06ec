# expect: rejected guard
# problem: softmax
# family: 3 host compute: .numpy()
# x.numpy() and numpy-free Python over its buffer
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
        a = x.numpy()
        out = []
        for row in a:
            m = max(row)
            e = [math.exp(v - m) for v in row]
            s = sum(e)
            out.append([v / s for v in e])
        _touch[(1,)](x, 1, BLOCK=16)
        return torch.tensor(out, dtype=x.dtype, device=x.device)
