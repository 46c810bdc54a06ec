# expect: rejected guard
# problem: softmax
# family: 4 jit body calls an undecorated helper
# honest: honest/jit_helper_decorated.py
# the jit body calls a plain Python helper that uses torch
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _helper(X, Y):
    Y.copy_(torch.softmax(X, -1))


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    _helper(X, Y)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
