# expect: correct
# problem: matmul_scale_residual
# GEMM with a three-operand epilogue (bias, per-column gamma, residual tensor), 32x32 tiles, K walked from the last tile to the first
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _proj_scale_residual(x_ptr, w_ptr, b_ptr, g_ptr, r_ptr, y_ptr, M, N, K,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(K_TILES):
        t = K_TILES - 1 - i
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    nmask = rn < N
    mask = (rm[:, None] < M) & nmask[None, :]
    bias = tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
    gamma = tl.load(g_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
    res = tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    y = res + gamma[None, :] * (acc + bias[None, :])
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=True, dtype=dtype)
        self.gamma = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        r2 = residual.contiguous().view(-1, N)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 32, 32, 32
        _proj_scale_residual[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
            x2, w, self.proj.bias, self.gamma, r2, y, M, N, K, BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
