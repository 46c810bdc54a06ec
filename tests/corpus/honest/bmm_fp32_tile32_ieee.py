# expect: correct
# problem: fixtures/honest/bmm_fp32.py
# fp32 batched GEMM with 32x32 tiles, BLOCK_K 32 and tl.dot(..., input_precision="ieee") (exact fp32 products, no tf32), batch on grid axis 0
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bmm(a_ptr, b_ptr, c_ptr, M, N, K,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    bz = tl.program_id(0).to(tl.int64)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(2) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + bz * M * K
    b_base = b_ptr + bz * K * N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(a_base + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_base + k[:, None] * N + rn[None, :], mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + bz * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        B, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((B, M, N), dtype=a.dtype, device=a.device)
        bm, bn, bk = 32, 32, 32
        _bmm[(B, triton.cdiv(M, bm), triton.cdiv(N, bn))](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk,
                                                          K_TILES=triton.cdiv(K, bk))
        return c
