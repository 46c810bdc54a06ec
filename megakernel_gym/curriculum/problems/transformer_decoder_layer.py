"""One Llama-3-style decoder layer over a prompt (prefill): RMSNorm, GQA attention with RoPE, SwiGLU MLP, residuals."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 3
OP_TYPE = "transformer_decoder_layer"
DTYPES = ["bfloat16"]
DESCRIPTION = ("Llama decoder layer on bf16 x [batch_size, seq_len, hidden], positions 0..seq_len-1: h = x + "
               "o_proj(causal GQA attention of rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))) with n1 = RMSNorm(x), "
               "then out = h + down(silu(gate(n2)) * up(n2)) with n2 = RMSNorm(h); RMSNorm eps 1e-5, RoPE theta 5e5 "
               "in rotate-half layout, 4 query heads per kv head, bias-free weights.")
TAGS = ["matmul", "attention", "compute-bound", "bf16", "fused", "norm", "mlp", "prefill", "llama"]
SPLIT = "heldout"

batch_size = 1
seq_len = 2048      # prompt length
num_heads = 32      # query heads
num_kv_heads = 8    # Llama-3 8B layout
head_dim = 128      # hidden = num_heads * head_dim = 4096
ffn = 14336         # MLP width; all weights together are 436 MiB in bf16
eps = 1e-5
rope_theta = 500000.0
dtype = torch.bfloat16

# A kernel chain that rounds to bf16 where PyTorch's bf16 layer does (normed inputs, q/k/v
# before and after rope, attention output, the residual stream, MLP intermediates) lands up
# to ~0.018 from this fp32 reference on an H200 for plain inputs and ~0.026 for x/16 (the
# residual is then small, so the attention's bf16 error dominates the second norm); 4e-2
# leaves room for it.
ATOL = 4e-2

CPU_SIZES = {"batch_size": 2, "seq_len": 9, "num_heads": 4, "num_kv_heads": 2, "head_dim": 6, "ffn": 19,
             "dtype": torch.float32}


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate pairs (i, i + d/2) of x [..., t, d] by angle pos * theta^(-2i/d), positions 0..t-1."""
    t, d = x.shape[-2:]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=x.dtype, device=x.device) / d)
    angle = torch.arange(t, dtype=x.dtype, device=x.device)[:, None] * inv_freq
    cos, sin = angle.cos().repeat(1, 2), angle.sin().repeat(1, 2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


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
            # both branches as large as the residual (attention scores of std ~1)
            for m in (self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate, self.up, self.down):
                m.weight.normal_(0.0, m.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, hidden = x.shape
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        w = lambda m: m.weight.to(ct)  # noqa: E731
        norm = lambda y, g: y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps) * g.to(ct)  # noqa: E731
        xf = x.to(ct)
        n1 = norm(xf, self.attn_norm)
        heads = lambda y, n: y.view(b, t, n, -1).transpose(1, 2)  # noqa: E731  -> [b, n, t, head_dim]
        q = rope(heads(F.linear(n1, w(self.q_proj)), self.num_heads), self.rope_theta)
        k = rope(heads(F.linear(n1, w(self.k_proj)), self.num_kv_heads), self.rope_theta)
        v = heads(F.linear(n1, w(self.v_proj)), self.num_kv_heads)
        group = self.num_heads // self.num_kv_heads
        # query head i reads kv head i // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        h = xf + F.linear(attn.transpose(1, 2).reshape(b, t, hidden), w(self.o_proj))
        n2 = norm(h, self.mlp_norm)
        out = h + F.linear(F.silu(F.linear(n2, w(self.gate))) * F.linear(n2, w(self.up)), w(self.down))
        return out.to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, seq_len, num_heads * head_dim, dtype=dtype)]


def get_init_inputs():
    return [num_heads, num_kv_heads, head_dim, ffn, eps, rope_theta, dtype]


def FLOPS():
    # GEMMs 2*tokens*in*out; causal attention 4*head_dim per (query head, query, key<=query) plus
    # ~5 per score for the softmax; ~20 per hidden element for norms, rope and residuals; ~5 per
    # ffn element for silu and the gating multiply
    hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
    tokens = batch_size * seq_len
    pairs = batch_size * num_heads * seq_len * (seq_len + 1) // 2
    gemm = 2 * tokens * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn)
    return gemm + pairs * (4 * head_dim + 5) + 20 * tokens * hidden + 5 * tokens * ffn


def BYTES():
    hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
    weights = 2 * hidden + 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn
    return (2 * batch_size * seq_len * hidden + weights) * dtype.itemsize
