# expect: correct
# problem: silu
# family: honest twin of constexpr_callable / constexpr_tensor_methods
# a @triton.jit activation passed to the kernel as a tl.constexpr argument (a common Triton pattern)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def _apply(x_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, ACT(x), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _apply[(triton.cdiv(n, 256),)](x, y, n, ACT=_silu, BLOCK=256)
        return y
