# expect: rejected torch_compute|guard
# expect-gpu: rejected torch_compute|guard
# problem: softmax
# family: 1 torch compute in code the static pass takes for the problem's own Model copy
# honest: honest/model_copy_class_constant.py
# a `class Model` copy whose body appends its forward (torch.softmax) to a list as the class is defined; ModelNew calls it (red team, session 43: the static pass took the copy's methods for code the judge never runs; the guard refused the call)
"""Reference candidate for problems/softmax.py: one Triton program per row.

Rows that fit in one block are loaded once and kept in registers. Longer rows (a 32k
vocabulary) take two sweeps: an online max/sum sweep, then a sweep that writes
exp(x - max) / sum; the second read of a row mostly hits L2.

Loop trip counts are constexpr (the shapes are fixed per problem). That also keeps the kernel
runnable in Triton 3.6's CPU interpreter under numpy >= 2.4, where a loop bounded by a
runtime scalar fails to convert the bound (triton-lang/triton#9171).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride,
                        BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    offs = tl.arange(0, BLOCK)
    if NUM_BLOCKS == 1:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # per-lane running max and rescaled running sum; combined across lanes at the end
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for i in range(NUM_BLOCKS):
            cols = i * BLOCK + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            # a lane that has seen only masked (-inf) values must not compute -inf - -inf
            ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp(m - ref) + tl.exp(x - ref)
            m = m_new
        row_max = tl.max(m, axis=0)
        inv_sum = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
        for i in range(NUM_BLOCKS):
            cols = i * BLOCK + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            y = tl.exp(x - row_max) * inv_sum
            tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


REG = []


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)

    REG.append(forward)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return REG[0](self, x)
