# expect: correct
# problem: fixtures/honest/gemm_scale_residual_fp32.py
# fp32 GEMM + scale + residual with Kahan-compensated accumulation across K tiles (each tile's tl.dot partial added with a running compensation term): more accurate than the reference, still a different rounding
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_kahan(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K, scale,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    total = tl.zeros((BM, BN), dtype=tl.float32)
    comp = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        part = tl.dot(a, b, input_precision="ieee")
        y = part - comp
        s = total + y
        comp = (s - total) - y
        total = s
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    res = tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], (total + bias[None, :]) * scale + res, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        r2 = residual.contiguous().view(-1, N)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 32, 32, 16
        _gemm_kahan[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
            x2, w, self.linear.bias, r2, y, M, N, K, self.scale, BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
