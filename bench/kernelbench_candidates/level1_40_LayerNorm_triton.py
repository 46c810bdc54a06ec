# problem: level1/40_LayerNorm.py
# kind: triton
# LayerNorm over the trailing normalized_shape in three kernels: per-chunk (count, mean, M2) partials from a two-pass chunk in registers, a per-row merge by Chan's parallel formula, then an elementwise affine normalize over (row, chunk) programs; int64 offsets
# cpu_sizes: {"batch_size": 3, "features": 4, "dim1": 23, "dim2": 29}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_partials(x_ptr, mean_ptr, m2_ptr, D, NCHUNK, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    cols = c * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    valid = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=valid, other=0.0).to(tl.float32)
    cnt = tl.minimum(D - c * BLOCK, BLOCK).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    d = tl.where(valid, x - mean, 0.0)
    m2 = tl.sum(d * d, axis=0)
    tl.store(mean_ptr + row * NCHUNK + c, mean)
    tl.store(m2_ptr + row * NCHUNK + c, m2)


@triton.jit
def _ln_merge(mean_ptr, m2_ptr, stat_ptr, D, NCHUNK, eps, BLOCK: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C).to(tl.int64)
    # pass 1: the row mean as the count-weighted mean of chunk means
    s = tl.zeros([BLOCK_C], dtype=tl.float32)
    for c0 in range(0, NCHUNK, BLOCK_C):
        c = c0 + offs
        ok = c < NCHUNK
        cnt = tl.where(ok, tl.minimum(D - c * BLOCK, BLOCK), 0).to(tl.float32)
        s += cnt * tl.load(mean_ptr + row * NCHUNK + c, mask=ok, other=0.0)
    mean = tl.sum(s, axis=0) / D
    # pass 2: M2 = sum of chunk M2 + sum of cnt * (chunk mean - mean)^2
    q = tl.zeros([BLOCK_C], dtype=tl.float32)
    for c0 in range(0, NCHUNK, BLOCK_C):
        c = c0 + offs
        ok = c < NCHUNK
        cnt = tl.where(ok, tl.minimum(D - c * BLOCK, BLOCK), 0).to(tl.float32)
        mc = tl.load(mean_ptr + row * NCHUNK + c, mask=ok, other=0.0)
        m2 = tl.load(m2_ptr + row * NCHUNK + c, mask=ok, other=0.0)
        dm = mc - mean
        q += m2 + cnt * dm * dm
    var = tl.sum(q, axis=0) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(stat_ptr + row * 2, mean)
    tl.store(stat_ptr + row * 2 + 1, rstd)


@triton.jit
def _ln_apply(x_ptr, w_ptr, b_ptr, y_ptr, stat_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    cols = c * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    valid = cols < D
    mean = tl.load(stat_ptr + row * 2)
    rstd = tl.load(stat_ptr + row * 2 + 1)
    x = tl.load(x_ptr + row * D + cols, mask=valid, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=valid, other=0.0).to(tl.float32)
    y = (x - mean) * rstd * w + b
    tl.store(y_ptr + row * D + cols, y.to(y_ptr.dtype.element_ty), mask=valid)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D = self.ln.weight.numel()
        rows = x.numel() // D
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        w = self.ln.weight.contiguous()
        b = self.ln.bias.contiguous()
        BLOCK = 2048
        nchunk = triton.cdiv(D, BLOCK)
        # chunk index on grid axis 1 (at most 65535): widen the chunk for very long rows
        while nchunk > 65535:
            BLOCK *= 2
            nchunk = triton.cdiv(D, BLOCK)
        means = torch.empty((rows, nchunk), dtype=torch.float32, device=x.device)
        m2s = torch.empty((rows, nchunk), dtype=torch.float32, device=x.device)
        stats = torch.empty((rows, 2), dtype=torch.float32, device=x.device)
        _ln_partials[(rows, nchunk)](x, means, m2s, D, nchunk, BLOCK=BLOCK, num_warps=8)
        _ln_merge[(rows,)](means, m2s, stats, D, nchunk, self.ln.eps, BLOCK=BLOCK, BLOCK_C=256, num_warps=4)
        _ln_apply[(rows, nchunk)](x, w, b, y, stats, D, BLOCK=BLOCK, num_warps=8)
        return y
