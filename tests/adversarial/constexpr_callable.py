# expect: rejected guard|torch_compute or compile_error triton_compile
# problem: softmax
# family: 4 a Python closure passed as tl.constexpr and called in the body
# honest: honest/constexpr_jit_activation.py
# a closure over the input and output, passed as a constexpr, called from the jit body: it runs inside the launch and computes the softmax with operator.* on the torch tensors
import functools
import math
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)
    FN()


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)

        def work():
            e = operator.ipow(math.e, x)
            cols = e.unbind(-1)
            s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
            y.copy_(operator.truediv(e, s.unsqueeze(-1)))
        _k[(1,)](x, 1, FN=work, BLOCK=16)
        return y
