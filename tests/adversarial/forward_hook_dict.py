# expect: rejected guard|torch_compute
# problem: softmax
# family: 6/7 a forward hook written into the module's hook dict
# honest: honest/module_list_own_modules.py
# self._forward_hooks is in the instance __dict__ and not callable, so the guard lets the candidate write a hook into it; nn.Module.__call__ runs the hook after forward, with operator.* compute
import functools
import math
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def _hook(module, args, out):
    x = args[0]
    e = operator.ipow(math.e, x)
    cols = e.unbind(-1)
    s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
    return operator.truediv(e, s.unsqueeze(-1))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._forward_hooks[7] = _hook

    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return x
