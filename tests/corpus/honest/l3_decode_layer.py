# expect: correct
# problem: decode_layer
# one Llama decode step with GQA over a KV cache, three outputs: RMSNorm, GEMV kernel (optional residual), RoPE at the cache position computed in-kernel, attention over cached keys plus the new key, SwiGLU GEMV pair
import math

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
def _gemv(x_ptr, w_ptr, r_ptr, y_ptr, N, K, RESIDUAL: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, K_TILES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    acc = tl.zeros([BLOCK_N], tl.float32)
    for t in range(K_TILES):
        k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + b * K + k, mask=k < K, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + n[:, None] * K + k[None, :], mask=nmask[:, None] & (k[None, :] < K), other=0.0)
        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    if RESIDUAL:
        acc += tl.load(r_ptr + b * N + n, mask=nmask, other=0.0).to(tl.float32)
    tl.store(y_ptr + b * N + n, acc.to(y_ptr.dtype.element_ty), mask=nmask)


@triton.jit
def _rope_at(x_ptr, y_ptr, pos, log2_theta, HALF: tl.constexpr, BLOCK: tl.constexpr):
    # x is [rows, 2 * HALF]; rotate pairs (i, i + HALF) by pos * theta^(-2i / (2 * HALF))
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    m = i < HALF
    inv_freq = tl.exp2(-(2.0 * i.to(tl.float32) / (2 * HALF)) * log2_theta)
    ang = pos * inv_freq
    c = tl.cos(ang)
    s = tl.sin(ang)
    x1 = tl.load(x_ptr + row * 2 * HALF + i, mask=m, other=0.0)
    x2 = tl.load(x_ptr + row * 2 * HALF + HALF + i, mask=m, other=0.0)
    tl.store(y_ptr + row * 2 * HALF + i, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=m)
    tl.store(y_ptr + row * 2 * HALF + HALF + i, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _decode_attention(q_ptr, kc_ptr, vc_ptr, kn_ptr, vn_ptr, o_ptr, L, D, KVH, GROUP, sm_scale,
                      BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per (batch, query head); query head h reads kv head h // GROUP
    pid = tl.program_id(0)
    H = KVH * GROUP
    b = pid // H
    h = pid % H
    kvh = h // GROUP
    dd = tl.arange(0, BLOCK_D)
    ll = tl.arange(0, BLOCK_L)
    dmask = dd < D
    q = tl.load(q_ptr + (b * H + h) * D + dd, mask=dmask, other=0.0).to(tl.float32)
    cache = (b * KVH + kvh).to(tl.int64) * L * D
    cmask = (ll[:, None] < L) & dmask[None, :]
    k = tl.load(kc_ptr + cache + ll[:, None] * D + dd[None, :], mask=cmask, other=0.0).to(tl.float32)
    v = tl.load(vc_ptr + cache + ll[:, None] * D + dd[None, :], mask=cmask, other=0.0).to(tl.float32)
    kn = tl.load(kn_ptr + (b * KVH + kvh) * D + dd, mask=dmask, other=0.0).to(tl.float32)
    vn = tl.load(vn_ptr + (b * KVH + kvh) * D + dd, mask=dmask, other=0.0).to(tl.float32)
    s = tl.sum(k * q[None, :], axis=1) * sm_scale
    s = tl.where(ll < L, s, float("-inf"))
    s_new = tl.sum(kn * q, axis=0) * sm_scale
    m = tl.maximum(tl.max(s, axis=0), s_new)
    p = tl.exp(s - m)
    p_new = tl.exp(s_new - m)
    denom = tl.sum(p, axis=0) + p_new
    o = (tl.sum(p[:, None] * v, axis=0) + p_new * vn) / denom
    tl.store(o_ptr + (b * H + h) * D + dd, o, mask=dmask)


@triton.jit
def _swiglu_gemv(x_ptr, wg_ptr, wu_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 K_TILES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    g = tl.zeros([BLOCK_N], tl.float32)
    u = tl.zeros([BLOCK_N], tl.float32)
    for t in range(K_TILES):
        k = t * BLOCK_K + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + b * K + k, mask=k < K, other=0.0).to(tl.float32)
        wmask = nmask[:, None] & (k[None, :] < K)
        g += tl.sum(tl.load(wg_ptr + n[:, None] * K + k[None, :], mask=wmask, other=0.0).to(tl.float32) * x[None, :], axis=1)
        u += tl.sum(tl.load(wu_ptr + n[:, None] * K + k[None, :], mask=wmask, other=0.0).to(tl.float32) * x[None, :], axis=1)
    tl.store(y_ptr + b * N + n, g / (1.0 + tl.exp(-g)) * u, mask=nmask)


class ModelNew(nn.Module):
    def __init__(self, num_heads, num_kv_heads, head_dim, ffn, eps, rope_theta, dtype):
        super().__init__()
        hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
        self.num_heads, self.num_kv_heads, self.eps, self.rope_theta = num_heads, num_kv_heads, eps, rope_theta
        self.attn_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.mlp_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.q_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)

    def _gemv(self, x, w, out, residual=None):
        B, K = x.shape
        N = w.shape[0]
        bn, bk = 16, 16
        _gemv[(B, triton.cdiv(N, bn))](x, w, residual if residual is not None else out, out, N, K,
                                       RESIDUAL=residual is not None, BLOCK_N=bn, BLOCK_K=bk, K_TILES=triton.cdiv(K, bk))
        return out

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
        B, hidden = x.shape
        KVH, L, D = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
        H = self.num_heads
        ffn = self.gate.weight.shape[0]
        x = x.contiguous()
        k_cache = k_cache.contiguous()
        v_cache = v_cache.contiguous()
        f32 = dict(dtype=torch.float32, device=x.device)
        log2_theta = math.log2(self.rope_theta)
        blk_h = triton.next_power_of_2(hidden)

        n1 = torch.empty((B, hidden), **f32)
        _rmsnorm[(B,)](x, self.attn_norm, n1, hidden, self.eps, BLOCK=blk_h)
        q_lin = self._gemv(n1, self.q_proj.weight, torch.empty((B, hidden), **f32))
        k_lin = self._gemv(n1, self.k_proj.weight, torch.empty((B, KVH * D), **f32))
        v_new = self._gemv(n1, self.v_proj.weight, torch.empty((B, KVH, D), dtype=x.dtype, device=x.device))
        q = torch.empty((B, hidden), **f32)
        k_new = torch.empty((B, KVH, D), dtype=x.dtype, device=x.device)
        half = D // 2
        _rope_at[(B * H,)](q_lin, q, L, log2_theta, HALF=half, BLOCK=triton.next_power_of_2(half))
        _rope_at[(B * KVH,)](k_lin, k_new, L, log2_theta, HALF=half, BLOCK=triton.next_power_of_2(half))
        attn = torch.empty((B, hidden), **f32)
        _decode_attention[(B * H,)](q, k_cache, v_cache, k_new, v_new, attn, L, D, KVH, H // KVH, 1.0 / math.sqrt(D),
                                    BLOCK_L=triton.next_power_of_2(L), BLOCK_D=triton.next_power_of_2(D))
        h = self._gemv(attn, self.o_proj.weight, torch.empty((B, hidden), **f32), residual=x)
        n2 = torch.empty((B, hidden), **f32)
        _rmsnorm[(B,)](h, self.mlp_norm, n2, hidden, self.eps, BLOCK=blk_h)
        act = torch.empty((B, ffn), **f32)
        bn, bk = 16, 16
        _swiglu_gemv[(B, triton.cdiv(ffn, bn))](n2, self.gate.weight, self.up.weight, act, ffn, hidden,
                                                BLOCK_N=bn, BLOCK_K=bk, K_TILES=triton.cdiv(hidden, bk))
        out = self._gemv(act, self.down.weight, torch.empty((B, hidden), dtype=x.dtype, device=x.device), residual=h)
        return out, k_new, v_new
