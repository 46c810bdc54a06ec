# expect: correct
# problem: softmax
# family: honest twin of walrus_default_rebinds_jit_constant / walrus_decorator_rebinds_jit_constant
# a module constant read in the @triton.jit body, a def with a default argument and a decorator, a class with a base:
# none of them binds a module name
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl

LANES = tl.constexpr(16)


@functools.lru_cache(maxsize=None)
def _block(n_cols, floor=LANES):
    return max(triton.next_power_of_2(n_cols), int(floor))


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = (offs < n_cols) & (offs < BLOCK * LANES)
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=_block(x.shape[1]))
        return y
