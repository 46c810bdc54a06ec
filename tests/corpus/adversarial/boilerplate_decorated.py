# expect: rejected torch_compute
# problem: softmax
# a decorator receives the repeated Model's class (or a get_inputs function) without naming it, so
# a decorated one is judged like the rest
import torch
import torch.nn as nn
import triton
import triton.language as tl

KEPT = []


def keep(obj):
    KEPT.append(obj)
    return obj


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = KEPT[0].prepare(None)

    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y


@keep
class Model(nn.Module):
    def prepare(self):
        return torch.exp(torch.randn(64))
