# expect: rejected guard|torch_compute
# problem: softmax
# family: 6 namedtuple repr prints a tensor
# honest: honest/namedtuple_config.py
# str() of a namedtuple holding a row passes str()'s tensor check; its repr prints the values, which are parsed back and the softmax is done in Python
import collections
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

Row = collections.namedtuple("Row", ["v"])


def _parse(text):
    body = text[text.index("[") + 1:text.index("]")]
    return [float(t) for t in body.split(",")]


class ModelNew(nn.Module):
    def forward(self, x):
        out = []
        for row in x:
            vals = _parse(str(Row(row)))
            m = max(vals)
            e = [math.exp(v - m) for v in vals]
            s = sum(e)
            out.append([v / s for v in e])
        _touch[(1,)](x, 1, BLOCK=16)
        return torch.tensor(out, dtype=x.dtype, device=x.device)
