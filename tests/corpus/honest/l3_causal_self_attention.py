# expect: correct
# problem: causal_self_attention
# QKV GEMM, a flash-style causal attention kernel (online softmax over key blocks, heads read in place from the packed qkv buffer), output projection GEMM
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _causal_attention(qkv_ptr, o_ptr, T, H, D, sm_scale,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, N_TILES: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    qi = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    dd = tl.arange(0, BLOCK_D)
    dmask = dd < D
    row = 3 * H * D                                   # qkv is [B, T, 3, H, D]
    base = qkv_ptr + b.to(tl.int64) * T * row + h * D
    q = tl.load(base + qi[:, None] * row + dd[None, :], mask=(qi[:, None] < T) & dmask[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for j in range(N_TILES):
        kj = j * BLOCK_N + tl.arange(0, BLOCK_N)
        kvmask = (kj[:, None] < T) & dmask[None, :]
        k = tl.load(base + H * D + kj[:, None] * row + dd[None, :], mask=kvmask, other=0.0)
        v = tl.load(base + 2 * H * D + kj[:, None] * row + dd[None, :], mask=kvmask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        # key 0 is visible to every query, so each row's max is finite from the first block on
        s = tl.where((kj[None, :] <= qi[:, None]) & (kj[None, :] < T), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    o_base = o_ptr + b.to(tl.int64) * T * H * D + h * D
    tl.store(o_base + qi[:, None] * (H * D) + dd[None, :], out, mask=(qi[:, None] < T) & dmask[None, :])


class ModelNew(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        self.num_heads = num_heads
        d_model = num_heads * head_dim
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False, dtype=dtype)
        self.proj = nn.Linear(d_model, d_model, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H = self.num_heads
        D = C // H
        x2 = x.contiguous().view(B * T, C)
        M = B * T
        qkv = torch.empty((M, 3 * C), dtype=torch.float32, device=x.device)
        attn = torch.empty((M, C), dtype=torch.float32, device=x.device)
        y = torch.empty((B, T, C), dtype=x.dtype, device=x.device)
        bm, bn, bk = 16, 16, 16
        _linear[(triton.cdiv(M, bm), triton.cdiv(3 * C, bn))](x2, self.qkv.weight, qkv, M, 3 * C, C,
                                                              BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(C, bk))
        # the interpreter gets 8-key blocks so the tiny test sequences span several of them
        qm, kn = (64, 64) if x.is_cuda else (16, 8)
        _causal_attention[(B * H, triton.cdiv(T, qm))](qkv, attn, T, H, D, 1.0 / math.sqrt(D), BLOCK_M=qm, BLOCK_N=kn,
                                                       BLOCK_D=max(16, triton.next_power_of_2(D)),
                                                       N_TILES=triton.cdiv(T, kn))
        _linear[(triton.cdiv(M, bm), triton.cdiv(C, bn))](attn, self.proj.weight, y, M, C, C,
                                                          BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(C, bk))
        return y
