# expect: rejected guard
# problem: softmax
# family: 5 state left for the next candidate (a module attribute assigned in a @triton.jit body)
# honest: honest/runtime_if_and_loop_bound.py
# red team 26: an honest softmax whose kernel body also rebinds triton.next_power_of_2, triton.cdiv and math.pi in
# the real modules through for-loop targets (the rules checked attribute paths only where read): correct, and the next
# candidate in the kept worker a runtime error. A jit body assigns plain names only
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    for triton.next_power_of_2 in (math.isqrt,):
        pass
    for triton.cdiv in (math.gcd,):
        pass
    for math.pi in (3.0,):
        pass
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=512)
        return y
