"""A GPT-2 transformer block over a prompt: pre-LayerNorm causal multi-head attention and a GELU MLP, with residuals."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 3
OP_TYPE = "gpt2_block"
DTYPES = ["float16"]
DESCRIPTION = ("GPT-2 block on fp16 x [batch_size, seq_len, d_model]: h = x + c_proj(causal MHA(c_attn(ln_1(x)))) "
               "with c_attn giving q, k, v (rows in that order, head-major) and scale 1/sqrt(head_dim), then "
               "out = h + mlp_proj(gelu_tanh(c_fc(ln_2(h)))); LayerNorms eps 1e-5 with affine, every Linear has a bias.")
TAGS = ["matmul", "attention", "compute-bound", "fp16", "fused", "norm", "mlp", "prefill"]
SPLIT = "train"

batch_size = 8
seq_len = 1024    # GPT-2's context length
num_heads = 16
head_dim = 64     # d_model = 1024, MLP width 4096 (GPT-2 medium)
eps = 1e-5
dtype = torch.float16

CPU_SIZES = {"batch_size": 2, "seq_len": 11, "num_heads": 3, "head_dim": 7, "dtype": torch.float32}


class Model(nn.Module):
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
        with torch.no_grad():
            # LayerNorm starts at 1/0 and nn.Linear's bias is tiny: trained-looking values make
            # every affine term matter; variance-preserving weights keep each branch O(1), and
            # c_attn a bit wider gives attention scores of std ~2, peaked like a trained model's
            for ln in (self.ln_1, self.ln_2):
                ln.weight.normal_(1.0, 0.25)
                ln.bias.normal_(0.0, 0.25)
            for lin in (self.c_attn, self.c_proj, self.c_fc, self.mlp_proj):
                lin.weight.normal_(0.0, lin.in_features ** -0.5)
                lin.bias.uniform_(-0.5, 0.5)
            self.c_attn.weight.mul_(2.0 ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for fp16 inputs, fp64 in a float64 run
        p = lambda m: (m.weight.to(ct), m.bias.to(ct))  # noqa: E731
        xf = x.to(ct)
        qkv = F.linear(F.layer_norm(xf, (d,), *p(self.ln_1), self.ln_1.eps), *p(self.c_attn))
        q, k, v = qkv.view(b, t, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        h = xf + F.linear(attn.transpose(1, 2).reshape(b, t, d), *p(self.c_proj))
        mid = F.gelu(F.linear(F.layer_norm(h, (d,), *p(self.ln_2), self.ln_2.eps), *p(self.c_fc)), approximate="tanh")
        return (h + F.linear(mid, *p(self.mlp_proj))).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, seq_len, num_heads * head_dim, dtype=dtype)]


def get_init_inputs():
    return [num_heads, head_dim, eps, dtype]


def FLOPS():
    # GEMMs 2*tokens*in*out (3d + d + 4d + 4d outputs of d or 4d inputs, 24*d^2 per token in all);
    # causal attention 4*head_dim per (head, query, key<=query) plus ~5 per score for the softmax;
    # ~20 per d element for two LayerNorms and the residuals, ~10 per MLP element for tanh-GELU
    d = num_heads * head_dim
    tokens = batch_size * seq_len
    pairs = batch_size * num_heads * seq_len * (seq_len + 1) // 2
    return 24 * tokens * d * d + pairs * (4 * head_dim + 5) + 20 * tokens * d + 40 * tokens * d


def BYTES():
    # x in, out back; weights 12*d^2 plus biases (3d + d + 4d + d) and two LayerNorms (4d)
    d = num_heads * head_dim
    return (2 * batch_size * seq_len * d + 12 * d * d + 13 * d) * dtype.itemsize
