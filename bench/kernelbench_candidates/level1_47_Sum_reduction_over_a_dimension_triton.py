# problem: level1/47_Sum_reduction_over_a_dimension.py
# kind: triton
# sum over self.dim with keepdim: (outer, R, inner) view, one program per (outer, 128 inner columns) accumulating 32xR-row tiles in fp32 then tree-summing; contiguous-row variant when inner == 1; int64 offsets
# cpu_sizes: {"batch_size": 3, "dim1": 301, "dim2": 151}
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    # reduced axis is the last one: one program per row, fp32 per-lane partial sums, tree-reduced
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        acc += tl.load(xr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


@triton.jit
def _sum_strided(x_ptr, y_ptr, R, inner, n_iblk, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # reduced axis in the middle of a contiguous (outer, R, inner) tensor: one program per
    # (outer index, BLOCK_I contiguous inner positions), BLOCK_R x BLOCK_I fp32 accumulator
    pid = tl.program_id(0)
    o = (pid // n_iblk).to(tl.int64)
    cols = (pid % n_iblk) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < inner
    base = o * R * inner
    rows = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rows
        offs = base + r.to(tl.int64)[:, None] * inner + cols[None, :]
        m = (r[:, None] < R) & cmask[None, :]
        acc += tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + o * inner + cols, total.to(y_ptr.dtype.element_ty), mask=cmask)


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
        out_shape = tuple(x.shape[:d]) + (1,) + tuple(x.shape[d + 1:])
        y = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        if y.numel() == 0:
            return y
        if inner == 1:
            block = min(4096, max(128, triton.next_power_of_2(R)))
            _sum_rows[(outer,)](x, y, R, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        else:
            bi = min(128, max(16, triton.next_power_of_2(inner)))
            br = min(32, triton.next_power_of_2(R))
            n_iblk = triton.cdiv(inner, bi)
            _sum_strided[(outer * n_iblk,)](x, y, R, inner, n_iblk, BLOCK_R=br, BLOCK_I=bi, num_warps=4)
        return y
