# expect: correct
# problem: fixtures/honest/gemm_relu_fp32.py
# fp32 GEMM without tl.dot: each K step is a broadcast multiply [BM, BK, BN] reduced with tl.sum over K, then added to the running fp32 tile
# BN is 8: Triton up to 3.6 rewrites sum(x[:, :, None] * y[None, :, :], 1) with both outer sides >= 16 into a tl.dot of
# TF32 precision (later versions make it IEEE), which on an H100 misses the fp32 reference by ~1e-3 and is rightly incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_bcast(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 32, 8, 16
        _gemm_bcast[(triton.cdiv(M, bm), triton.cdiv(N, bn))](x2, w, self.linear.bias, y, M, N, K,
                                                              BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
