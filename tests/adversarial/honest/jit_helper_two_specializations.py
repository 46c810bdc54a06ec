# expect: correct
# problem: silu
# family: honest twin of jit_helper_specialization_union, jit_compare_chain_short_circuit, jit_static_range_else
# one @triton.jit helper called with two constexprs that take its two branches (full tiles unmasked, the tail
# masked): a place of the helper's body has both outcomes over the compile, each the outcome of one specialization,
# and the interpreter's check of each call against that call's own specialization keeps it correct
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tile(x_ptr, y_ptr, offs, n, MASKED: tl.constexpr):
    if MASKED:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)
    else:
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, x * tl.sigmoid(x))


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if (pid + 1) * BLOCK <= n:
        _tile(x_ptr, y_ptr, offs, n, False)
    else:
        _tile(x_ptr, y_ptr, offs, n, True)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
