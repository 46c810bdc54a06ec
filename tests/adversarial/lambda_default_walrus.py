# expect: rejected guard
# problem: softmax
# family: 6 walrus and lambda defaults
# honest: honest/closure_walrus_lambda.py
# a walrus binds torch in a comprehension, a lambda default captures its softmax
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
        _touch[(1,)](x, 1, BLOCK=16)
        mods = [(t := m) for m in [torch]]
        f = lambda v, sm=t.softmax: sm(v, -1)  # noqa: E731
        return f(x)
