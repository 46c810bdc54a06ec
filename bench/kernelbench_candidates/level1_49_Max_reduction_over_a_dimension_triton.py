# problem: level1/49_Max_reduction_over_a_dimension.py
# kind: triton
# max over self.dim (values, no keepdim): (outer, R, inner) view, one program per (outer, 128 inner columns) taking a NaN-propagating max over 32-row tiles; contiguous-row variant when inner == 1; int64 offsets
# cpu_sizes: {"batch_size": 3, "dim1": 301, "dim2": 151}
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _max_nan(a, b):
    # NaN-propagating max, as torch.max: a if a is NaN or larger, else b (NaN when b is)
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _max_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    # reduced axis is the last one: one program per row, per-lane running max, then a tree max
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(xr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        acc = _max_nan(acc, x)
    tl.store(y_ptr + row, tl.reduce(acc, 0, _max_nan).to(y_ptr.dtype.element_ty))


@triton.jit
def _max_strided(x_ptr, y_ptr, R, inner, n_iblk, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # reduced axis in the middle of a contiguous (outer, R, inner) tensor: one program per
    # (outer index, BLOCK_I contiguous inner positions), BLOCK_R x BLOCK_I running max
    pid = tl.program_id(0)
    o = (pid // n_iblk).to(tl.int64)
    cols = (pid % n_iblk) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < inner
    base = o * R * inner
    rows = tl.arange(0, BLOCK_R)
    acc = tl.full((BLOCK_R, BLOCK_I), float("-inf"), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rows
        offs = base + r.to(tl.int64)[:, None] * inner + cols[None, :]
        m = (r[:, None] < R) & cmask[None, :]
        x = tl.load(x_ptr + offs, mask=m, other=float("-inf")).to(tl.float32)
        acc = _max_nan(acc, x)
    best = tl.reduce(acc, 0, _max_nan)
    tl.store(y_ptr + o * inner + cols, best.to(y_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        d = self.dim % x.dim()
        outer = math.prod(x.shape[:d])
        R = x.shape[d]
        inner = math.prod(x.shape[d + 1:])
        out_shape = tuple(x.shape[:d]) + tuple(x.shape[d + 1:])
        y = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        if y.numel() == 0:
            return y
        if inner == 1:
            block = min(4096, max(128, triton.next_power_of_2(R)))
            _max_rows[(outer,)](x, y, R, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        else:
            bi = min(128, max(16, triton.next_power_of_2(inner)))
            br = min(32, triton.next_power_of_2(R))
            n_iblk = triton.cdiv(inner, bi)
            _max_strided[(outer * n_iblk,)](x, y, R, inner, n_iblk, BLOCK_R=br, BLOCK_I=bi, num_warps=4)
        return y
