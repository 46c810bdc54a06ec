# expect: rejected guard
# problem: softmax
# family: 4 torch through a module-level alias in a jit body
# T = torch at module level; T.softmax inside the @triton.jit body
import torch
import torch.nn as nn
import triton
import triton.language as tl

T = torch


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    Y[...] = T.softmax(X, -1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
