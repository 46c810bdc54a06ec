# expect: correct
# problem: rmsnorm_matmul
# RMSNorm fused into the GEMM prologue: each program first computes the inverse rms of its rows, then scales the x tiles (and the gain) as it streams K
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_linear(x_ptr, g_ptr, w_ptr, y_ptr, M, N, K, eps,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    mmask = rm < M
    ss = tl.zeros((BM,), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=mmask[:, None] & (k[None, :] < K), other=0.0).to(tl.float32)
        ss += tl.sum(a * a, axis=1)
    inv_rms = 1.0 / tl.sqrt(ss / K + eps)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        kmask = k < K
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        g = tl.load(g_ptr + k, mask=kmask, other=0.0).to(tl.float32)
        h = (a * inv_rms[:, None] * g[None, :]).to(x_ptr.dtype.element_ty)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & kmask[:, None], other=0.0)
        acc = tl.dot(h, b, acc, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mmask[:, None] & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, out_features: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.proj = nn.Linear(hidden, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 16, 32, 16
        _rmsnorm_linear[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
            x2, self.norm_weight, w, y, M, N, K, self.eps, BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
