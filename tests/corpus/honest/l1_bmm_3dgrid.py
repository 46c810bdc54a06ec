# expect: correct
# problem: batched_matmul
# batched GEMM with the batch on grid axis 2, per-batch base offsets from strides, tl.dot (ieee) tiles of 16x16x16 with masked M/N/K tails
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bmm(a_ptr, b_ptr, c_ptr, M, N, K,
         sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    bz = tl.program_id(2).to(tl.int64)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + bz * sab
    b_base = b_ptr + bz * sbb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(a_base + rm[:, None] * sam + k[None, :] * sak, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_base + k[:, None] * sbk + rn[None, :] * sbn, mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    c_ptrs = c_ptr + bz * scb + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        B, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((B, M, N), dtype=a.dtype, device=a.device)
        bm, bn, bk = 16, 16, 16
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn), B)
        _bmm[grid](a, b, c, M, N, K,
                   a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
                   c.stride(0), c.stride(1), c.stride(2),
                   BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return c
