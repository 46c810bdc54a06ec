# expect: correct
# problem: gpt2_block
# a GPT-2 block in seven launches of three kernels: LayerNorm rows, one GEMM kernel with constexpr-selected epilogues (bias, tanh-GELU, residual), and causal attention with the max-subtracted softmax over the whole key row
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, d * rstd * w + b, mask=mask)


@triton.jit
def _linear(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K,
            GELU: tl.constexpr, RESIDUAL: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    y = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    if GELU:
        u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
        y = 0.5 * y * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
    if RESIDUAL:
        y += tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _causal_attention(qkv_ptr, o_ptr, T, H, D, sm_scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per (batch, head, query): the whole key row fits one block at these sizes
    pid = tl.program_id(0)
    qi = pid % T
    bh = pid // T
    b = bh // H
    h = bh % H
    row = 3 * H * D
    base = qkv_ptr + b.to(tl.int64) * T * row + h * D
    dd = tl.arange(0, BLOCK_D)
    kj = tl.arange(0, BLOCK_T)
    dmask = dd < D
    q = tl.load(base + qi * row + dd, mask=dmask, other=0.0)
    kvmask = (kj[:, None] <= qi) & dmask[None, :]
    k = tl.load(base + H * D + kj[:, None] * row + dd[None, :], mask=kvmask, other=0.0)
    s = tl.sum(k * q[None, :], axis=1) * sm_scale
    s = tl.where(kj <= qi, s, float("-inf"))
    p = tl.exp(s - tl.max(s, axis=0))
    p = p / tl.sum(p, axis=0)
    v = tl.load(base + 2 * H * D + kj[:, None] * row + dd[None, :], mask=kvmask, other=0.0)
    o = tl.sum(p[:, None] * v, axis=0)
    tl.store(o_ptr + (b.to(tl.int64) * T + qi) * (H * D) + h * D + dd, o, mask=dmask)


class ModelNew(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        d = num_heads * head_dim
        self.num_heads = num_heads
        self.ln_1 = nn.LayerNorm(d, eps=eps, dtype=dtype)
        self.c_attn = nn.Linear(d, 3 * d, dtype=dtype)
        self.c_proj = nn.Linear(d, d, dtype=dtype)
        self.ln_2 = nn.LayerNorm(d, eps=eps, dtype=dtype)
        self.c_fc = nn.Linear(d, 4 * d, dtype=dtype)
        self.mlp_proj = nn.Linear(4 * d, d, dtype=dtype)

    def _gemm(self, x, lin, out, gelu=False, residual=None):
        M, K = x.shape
        N = lin.weight.shape[0]
        bm, bn, bk = 16, 32, 16
        res = residual if residual is not None else out
        _linear[(triton.cdiv(M, bm), triton.cdiv(N, bn))](x, lin.weight, lin.bias, res, out, M, N, K,
                                                          GELU=gelu, RESIDUAL=residual is not None,
                                                          BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H = self.num_heads
        D = d // H
        M = B * T
        x2 = x.contiguous().view(M, d)
        f32 = dict(dtype=torch.float32, device=x.device)
        n1 = torch.empty((M, d), **f32)
        _layernorm[(M,)](x2, self.ln_1.weight, self.ln_1.bias, n1, d, self.ln_1.eps, BLOCK=triton.next_power_of_2(d))
        qkv = self._gemm(n1, self.c_attn, torch.empty((M, 3 * d), **f32))
        attn = torch.empty((M, d), **f32)
        _causal_attention[(B * H * T,)](qkv, attn, T, H, D, 1.0 / math.sqrt(D),
                                        BLOCK_T=triton.next_power_of_2(T), BLOCK_D=triton.next_power_of_2(D))
        h = self._gemm(attn, self.c_proj, torch.empty((M, d), **f32), residual=x2)
        n2 = torch.empty((M, d), **f32)
        _layernorm[(M,)](h, self.ln_2.weight, self.ln_2.bias, n2, d, self.ln_2.eps, BLOCK=triton.next_power_of_2(d))
        mid = self._gemm(n2, self.c_fc, torch.empty((M, 4 * d), **f32), gelu=True)
        out = torch.empty((B, T, d), dtype=x.dtype, device=x.device)
        self._gemm(mid, self.mlp_proj, out.view(M, d), residual=h)
        return out
