# expect: rejected guard|introspection
# problem: softmax
# family: 6 star-args through _apply_
# honest: honest/functools_partial_launcher.py
# g = getattr; g(*(torch, name)): the call goes through _apply_ and names no getattr call statically
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

G = getattr


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        f = G(*(torch, "soft" + "max"))
        return f(x, -1)
