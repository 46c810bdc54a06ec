# expect: correct
# problem: linear_swiglu
# two GEMMs sharing each x tile (gate and up accumulators in one program), SwiGLU epilogue with an overflow-free sigmoid
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swiglu(x_ptr, wg_ptr, wu_ptr, y_ptr, M, N, K,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        wmask = (rn[None, :] < N) & (k[:, None] < K)
        bg = tl.load(wg_ptr + rn[None, :] * K + k[:, None], mask=wmask, other=0.0)
        bu = tl.load(wu_ptr + rn[None, :] * K + k[:, None], mask=wmask, other=0.0)
        acc_g = tl.dot(a, bg, acc_g, input_precision="ieee")
        acc_u = tl.dot(a, bu, acc_u, input_precision="ieee")
    e = tl.exp(-tl.abs(acc_g))
    sig = tl.where(acc_g >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    y = acc_g * sig * acc_u
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wg = self.gate_proj.weight.contiguous()
        wu = self.up_proj.weight.contiguous()
        N, K = wg.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 16, 16, 16
        _swiglu[(triton.cdiv(M, bm), triton.cdiv(N, bn))](x2, wg, wu, y, M, N, K,
                                                          BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
