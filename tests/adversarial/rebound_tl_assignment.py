# expect: rejected guard
# problem: softmax
# family: 4 module-level name rebound after the def
# tl is rebound to torch after the @triton.jit def, so tl.softmax in the body is torch's at run time
import triton.language
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: triton.language.constexpr, Y: triton.language.constexpr):
    Y[...] = tl.softmax(X, -1)


tl = torch


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
