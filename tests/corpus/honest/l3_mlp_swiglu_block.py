# expect: correct
# problem: mlp_swiglu_block
# a whole Llama MLP block in three kernels: RMSNorm rows, gate/up dual GEMM with the SwiGLU epilogue, down GEMM with the residual add fused
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, g_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    g = tl.load(g_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, x * inv * g, mask=mask)


@triton.jit
def _gate_up(h_ptr, wg_ptr, wu_ptr, a_ptr, M, N, K,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    g = tl.zeros((BM, BN), dtype=tl.float32)
    u = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        h = tl.load(h_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        wmask = (rn[None, :] < N) & (k[:, None] < K)
        g = tl.dot(h, tl.load(wg_ptr + rn[None, :] * K + k[:, None], mask=wmask, other=0.0).to(tl.float32), g,
                   input_precision="ieee")
        u = tl.dot(h, tl.load(wu_ptr + rn[None, :] * K + k[:, None], mask=wmask, other=0.0).to(tl.float32), u,
                   input_precision="ieee")
    act = g / (1.0 + tl.exp(-g)) * u
    tl.store(a_ptr + rm[:, None] * N + rn[None, :], act, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _down_residual(a_ptr, w_ptr, x_ptr, y_ptr, M, N, K,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(a_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a, w.to(tl.float32), acc, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], (x + acc).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x.shape[-1]
        ffn = self.gate.weight.shape[0]
        x2 = x.contiguous().view(-1, hidden)
        M = x2.shape[0]
        h = torch.empty((M, hidden), dtype=torch.float32, device=x.device)
        act = torch.empty((M, ffn), dtype=torch.float32, device=x.device)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _rmsnorm[(M,)](x2, self.norm_weight, h, hidden, self.eps, BLOCK=triton.next_power_of_2(hidden))
        bm, bn, bk = 16, 16, 16
        _gate_up[(triton.cdiv(M, bm), triton.cdiv(ffn, bn))](h, self.gate.weight, self.up.weight, act, M, ffn, hidden,
                                                             BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(hidden, bk))
        _down_residual[(triton.cdiv(M, bm), triton.cdiv(hidden, bn))](act, self.down.weight, x2, y, M, hidden, ffn,
                                                                      BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(ffn, bk))
        return y
