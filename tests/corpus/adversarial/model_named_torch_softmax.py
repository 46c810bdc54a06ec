# expect: rejected torch_compute
# problem: softmax
# the candidate's class is named Model (KernelBench-v3) and has no ModelNew: its body is the candidate,
# so torch.softmax there is refused like anywhere else
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return torch.softmax(y, dim=-1)


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []
