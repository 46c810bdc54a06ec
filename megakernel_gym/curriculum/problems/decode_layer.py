"""One decode step of a Llama-3-style layer for a batch of sequences, over their KV caches plus the new token."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 3
OP_TYPE = "decode_layer"
DTYPES = ["bfloat16"]
DESCRIPTION = ("Llama decode step: bf16 x [batch_size, hidden] (one new token per sequence, position cache_len), "
               "k_cache/v_cache [batch_size, num_kv_heads, cache_len, head_dim] (keys already rotated). "
               "n1 = RMSNorm(x); q, k, v projections, RoPE (theta 5e5, rotate-half) on q and the new k; GQA "
               "attention over the cache plus the new k/v; h = x + o_proj(attn); out = h + down(silu(gate(n2)) * "
               "up(n2)), n2 = RMSNorm(h), eps 1e-5. Returns (out, k_new, v_new), the last two [batch_size, "
               "num_kv_heads, head_dim] (k_new rotated): the entries the caller appends to the caches.")
TAGS = ["matmul", "attention", "decode", "memory-bound", "bf16", "fused", "norm", "mlp", "llama"]
SPLIT = "train"

batch_size = 16     # sequences decoding together
cache_len = 2048    # tokens already cached per sequence; each cache is 64 MiB in bf16
num_heads = 32
num_kv_heads = 8    # 4 query heads per kv head (Llama-3 8B)
head_dim = 128      # hidden = 4096
ffn = 14336         # weights (436 MiB in bf16) dominate the traffic: a memory-bound step
eps = 1e-5
rope_theta = 500000.0
dtype = torch.bfloat16

# A kernel chain that rounds to bf16 where PyTorch's bf16 layer does (normed inputs, q/k/v,
# attention output, the residual stream, MLP intermediates) lands up to ~0.012 from this fp32
# reference on an H200, past the bf16 default atol of 1e-2 on outputs near zero.
ATOL = 2e-2

# The caches are inputs that no norm rescales: scaling them by 16 multiplies the scores by 16
# (near-argmax attention, where bf16 rounding of q flips near-ties) and the values by 16; a +6
# shift gives the attention output a ~6 offset whose bf16 rounding before o_proj costs ~0.05.
# Correct bf16 kernels failed both on an H200, so only plain inputs are used.
INPUT_TRANSFORMS = ()

CPU_SIZES = {"batch_size": 3, "cache_len": 11, "num_heads": 6, "num_kv_heads": 2, "head_dim": 6, "ffn": 29,
             "dtype": torch.float32}


def rope_at(x: torch.Tensor, pos: int, theta: float) -> torch.Tensor:
    """Rotate pairs (i, i + d/2) of x [..., d] by angle pos * theta^(-2i/d)."""
    d = x.shape[-1]
    angle = pos * theta ** (-torch.arange(0, d, 2, dtype=x.dtype, device=x.device) / d)
    cos, sin = angle.cos().repeat(2), angle.sin().repeat(2)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1) * sin


class Model(nn.Module):
    def __init__(self, num_heads, num_kv_heads, head_dim, ffn, eps, rope_theta, dtype):
        super().__init__()
        hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
        self.num_heads, self.num_kv_heads, self.eps, self.rope_theta = num_heads, num_kv_heads, eps, rope_theta
        self.attn_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.mlp_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        lin = lambda i, o: nn.Linear(i, o, bias=False, dtype=dtype)  # noqa: E731
        self.q_proj, self.k_proj, self.v_proj = lin(hidden, hidden), lin(hidden, kv), lin(hidden, kv)
        self.o_proj = lin(hidden, hidden)
        self.gate, self.up, self.down = lin(hidden, ffn), lin(hidden, ffn), lin(ffn, hidden)
        with torch.no_grad():
            self.attn_norm.normal_(1.0, 0.25)  # gains far from 1, so skipping one fails
            self.mlp_norm.normal_(1.0, 0.25)
            # nn.Linear's default init shrinks outputs by sqrt(3); variance-preserving weights keep
            # both branches as large as the residual (scores of std ~1 against the cached keys)
            for m in (self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate, self.up, self.down):
                m.weight.normal_(0.0, m.in_features ** -0.5)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
        b, hidden = x.shape
        pos = k_cache.shape[2]  # the new token follows the cached ones
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        w = lambda m: m.weight.to(ct)  # noqa: E731
        norm = lambda y, g: y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps) * g.to(ct)  # noqa: E731
        xf = x.to(ct)
        n1 = norm(xf, self.attn_norm)
        # q as [b, kv_heads, group, head_dim]: the query heads that share one kv head, side by side
        q = F.linear(n1, w(self.q_proj)).view(b, self.num_kv_heads, -1, k_cache.shape[3])
        q = rope_at(q, pos, self.rope_theta)
        k_new = rope_at(F.linear(n1, w(self.k_proj)).view(b, self.num_kv_heads, 1, -1), pos, self.rope_theta)
        v_new = F.linear(n1, w(self.v_proj)).view(b, self.num_kv_heads, 1, -1)
        keys = torch.cat([k_cache.to(ct), k_new], dim=2)  # [b, kv_heads, pos + 1, head_dim]
        values = torch.cat([v_cache.to(ct), v_new], dim=2)
        probs = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        h = xf + F.linear((probs @ values).reshape(b, hidden), w(self.o_proj))
        n2 = norm(h, self.mlp_norm)
        out = h + F.linear(F.silu(F.linear(n2, w(self.gate))) * F.linear(n2, w(self.up)), w(self.down))
        # the new token is 1 of cache_len + 1 keys, so out alone barely depends on k_proj and
        # v_proj; returning the cache entries makes them count
        return out.to(x.dtype), k_new.squeeze(2).to(x.dtype), v_new.squeeze(2).to(x.dtype)


def get_inputs():
    x = torch.randn(batch_size, num_heads * head_dim, dtype=dtype)
    k_cache = torch.randn(batch_size, num_kv_heads, cache_len, head_dim, dtype=dtype)
    v_cache = torch.randn(batch_size, num_kv_heads, cache_len, head_dim, dtype=dtype)
    return [x, k_cache, v_cache]


def get_init_inputs():
    return [num_heads, num_kv_heads, head_dim, ffn, eps, rope_theta, dtype]


def FLOPS():
    # GEMVs 2*batch*in*out; attention 4*head_dim per (query head, key) over cache_len + 1 keys
    # plus ~5 per score; ~20 per hidden element for norms, rope and residuals; ~5 per ffn element
    hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
    gemm = 2 * batch_size * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn)
    scores = batch_size * num_heads * (cache_len + 1)
    return gemm + scores * (4 * head_dim + 5) + 20 * batch_size * hidden + 5 * batch_size * ffn


def BYTES():
    # the weights and the two caches, read once; x in, out and the new k/v back
    hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
    weights = 2 * hidden + 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn
    caches = 2 * batch_size * num_kv_heads * cache_len * head_dim
    return (2 * batch_size * hidden + 2 * batch_size * kv + weights + caches) * dtype.itemsize
