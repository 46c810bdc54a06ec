# expect: correct
# problem: softmax
# family: honest twin of jit_str_to_ty_eval / jit_wraps_renames_tl
# the row's max and sum through tl.reduce with @triton.jit combine functions of the file's own (the cpu backend's
# interpreter now runs a combine function's rewritten body, as it runs a kernel's), tl.PropagateNan named in the body,
# and int on a constexpr only
import torch
import torch.nn as nn
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, int(BLOCK))
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.reduce(x, 0, _max_combine)
    e = tl.exp2((x - m) * LOG2E)
    s = tl.reduce(e, 0, _add_combine)
    tl.store(y_ptr + row * n_cols + offs, e / s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
