# expect: rejected torch_compute
# problem: softmax
# torch compute hidden in a repeated get_init_inputs, run from __init__ (where no dynamic check
# watches): once something calls it, its body is judged like the rest
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = get_init_inputs()

    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y


def get_init_inputs():
    return [torch.softmax(torch.randn(64), dim=0)]
