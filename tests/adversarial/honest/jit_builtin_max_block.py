# expect: correct
# problem: softmax
# family: honest twin of jit_branch_split_*
# softmax whose masked lanes are clamped with Python's builtin max on a block:
# `max(x, -1e30)`. A GPU compile maps the builtin max to Triton's builtin_max (elementwise tl.maximum), so on a
# GPU this is an ordinary clamp; under the CPU interpreter the body calls Python's max, which asks bool() of a
# block comparison (True for any block) and returns the scalar -1e30 for the whole row.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    x = max(x, -1e30)
    m = tl.max(x, axis=0)
    e = tl.where(mask, tl.exp(x - m), 0.0)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
