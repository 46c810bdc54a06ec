# expect: rejected torch_compute
# problem: softmax
# a copy of the problem's Model (torch compute the judge may ignore while nothing calls it), then
# ModelNew.forward calls it after launching a kernel
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return Model.forward(self, y)


class Model(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1)
