# expect: rejected guard
# problem: softmax
# family: 4 torch inside a @triton.jit body
# honest: honest/jit_helper_decorated.py
# torch.softmax called inside a @triton.jit body, which the cpu backend's interpreter runs as Python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    Y[...] = torch.softmax(X, -1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
