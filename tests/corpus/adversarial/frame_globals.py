# expect: rejected introspection
# problem: softmax
# reaches a repeated get_inputs (torch compute the static rules let pass while nothing names it)
# through a generator's frame, without naming it, and calls it from __init__ where no check watches
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _gen():
    yield 0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = _gen().gi_frame.f_globals["get_" + "inputs"]()

    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y


def get_inputs():
    return [torch.softmax(torch.randn(64), dim=0)]
