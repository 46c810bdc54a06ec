# expect: rejected guard
# problem: softmax
# family: 4 getattr inside a jit body
# getattr(X, "softmax") on a constexpr tensor inside the jit body
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    Y[...] = getattr(X, "soft" + "max")(-1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
