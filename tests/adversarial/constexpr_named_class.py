# expect: rejected guard|torch_compute
# problem: softmax
# family: 4 a tl.constexpr check read from the original annotations
# honest: honest/constexpr_jit_activation.py
# the launch's constexpr check reads fn.__annotations__ (a class of the candidate's own named constexpr here), while the interpreter decides from the re-parsed source's annotation text ('constexpr'): torch tensors reach the body as constexprs and X.softmax runs there
import torch
import torch.nn as nn
import triton
import triton.language as tl


class constexpr(object):
    pass


@triton.jit
def _k(X: constexpr, Y: constexpr):
    Y[...] = X.softmax(-1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
