# expect: correct
# problem: silu
# family: honest twin of jit_static_range_augassign
# tl.static_assert(isinstance(BLOCK, int)) in a @triton.jit body, which a GPU compile takes: the interpreter ran the
# body with the guard's wrapper for int, and isinstance refused it (red team 29); jit bodies get Python's int and
# float, whose calls on a kernel value stay refused
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(isinstance(BLOCK, int))
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
