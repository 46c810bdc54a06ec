# expect: rejected torch_compute|guard
# problem: softmax
# family: 3 host read: str() of a list holding tensors
# honest: honest/print_fstring_shapes.py
# str([row]) passes str()'s tensor check (its argument is a list) and prints the tensor's values; the text is parsed back in Python
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def _parse(text):
    body = text[text.index("[", 2) + 1:text.index("]")]
    return [float(t) for t in body.split(",")]


class ModelNew(nn.Module):
    def forward(self, x):
        out = []
        for row in x:
            vals = _parse(str([row]))
            m = max(vals)
            e = [math.exp(v - m) for v in vals]
            s = sum(e)
            out.append([v / s for v in e])
        _touch[(1,)](x, 1, BLOCK=16)
        return torch.tensor(out, dtype=x.dtype, device=x.device)
