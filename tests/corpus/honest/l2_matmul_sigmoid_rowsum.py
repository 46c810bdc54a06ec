# expect: correct
# problem: matmul_bias_sigmoid_rowsum
# GEMM + bias + sigmoid reduced to one value per row: column tiles of the product are never stored, their sigmoids summed into a per-row fp32 total
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_sigmoid_rowsum(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         K_TILES: tl.constexpr, N_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    mmask = rm < M
    total = tl.zeros((BM,), dtype=tl.float32)
    for j in range(N_TILES):
        rn = j * BN + tl.arange(0, BN)
        nmask = rn < N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for t in range(K_TILES):
            k = t * BK + rk
            a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=mmask[:, None] & (k[None, :] < K), other=0.0)
            b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=nmask[None, :] & (k[:, None] < K), other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        z = acc + tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        e = tl.exp(-tl.abs(z))
        sig = tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        total += tl.sum(tl.where(nmask[None, :], sig, 0.0), axis=1)
    tl.store(out_ptr + rm, total.to(out_ptr.dtype.element_ty), mask=mmask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        bm, bn, bk = 16, 16, 16
        _gemm_sigmoid_rowsum[(triton.cdiv(M, bm),)](x2, w, self.linear.bias, out, M, N, K, BM=bm, BN=bn, BK=bk,
                                                    K_TILES=triton.cdiv(K, bk), N_TILES=triton.cdiv(N, bn))
        return out
