# problem: level1/38_L1Norm_.py
# kind: triton
# x / mean(|x|, dim=1): one program per row, fp32 per-lane sums of |x| over 4096-column chunks, tree-reduced, then a second sweep dividing; strided variant for N-D
# cpu_sizes: {"batch_size": 3, "dim": 5003}
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l1norm_rows(x_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    # dim 1 is the last (contiguous) axis: one program per row, fp32 per-lane partial sums over
    # <=4096-column chunks, a tree reduction, then a second sweep writing x / denominator
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * n_cols
    yr = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(xr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += tl.abs(x)
    total = tl.sum(acc, axis=0)
    denom = total / n_cols
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(xr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(yr + cols, (x / denom).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _l1norm_strided(x_ptr, y_ptr, R, inner, n_iblk, eps,
              BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, ONE_TILE: tl.constexpr):
    # reduction over the middle axis of a contiguous (outer, R, inner) tensor: one program per
    # (outer index, block of BLOCK_I contiguous inner positions); R in BLOCK_R-row tiles
    pid = tl.program_id(0)
    o = (pid // n_iblk).to(tl.int64)
    cols = (pid % n_iblk) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < inner
    base = o * R * inner
    rows = tl.arange(0, BLOCK_R)
    if ONE_TILE:
        # the whole reduced axis fits one tile: read x once
        offs = base + rows.to(tl.int64)[:, None] * inner + cols[None, :]
        m = (rows[:, None] < R) & cmask[None, :]
        x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        total = tl.sum(tl.abs(x), axis=0)
        denom = total / R
        denom = tl.where(cmask, denom, 1.0)   # padded columns (never stored)
        tl.store(y_ptr + offs, (x / denom[None, :]).to(y_ptr.dtype.element_ty), mask=m)
    else:
        acc = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + rows
            offs = base + r.to(tl.int64)[:, None] * inner + cols[None, :]
            m = (r[:, None] < R) & cmask[None, :]
            x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
            acc += tl.abs(x)
        total = tl.sum(acc, axis=0)
        denom = total / R
        denom = tl.where(cmask, denom, 1.0)   # padded columns (never stored)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + rows
            offs = base + r.to(tl.int64)[:, None] * inner + cols[None, :]
            m = (r[:, None] < R) & cmask[None, :]
            x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
            tl.store(y_ptr + offs, (x / denom[None, :]).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        outer = x.shape[0]
        R = x.shape[1]
        inner = math.prod(x.shape[2:])
        if y.numel() == 0:
            return y
        eps = 0.0
        if inner == 1:
            block = min(4096, max(128, triton.next_power_of_2(R)))
            _l1norm_rows[(outer,)](x, y, R, eps, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        else:
            bi = min(128, max(16, triton.next_power_of_2(inner)))
            rp = triton.next_power_of_2(R)
            one = rp * bi <= 8192
            br = rp if one else 32
            n_iblk = triton.cdiv(inner, bi)
            _l1norm_strided[(outer * n_iblk,)](x, y, R, inner, n_iblk, eps, BLOCK_R=br, BLOCK_I=bi,
                                             ONE_TILE=one, num_warps=8 if br * bi >= 4096 else 4)
        return y
