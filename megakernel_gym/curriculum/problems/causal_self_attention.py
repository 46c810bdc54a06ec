"""Multi-head causal self-attention for a prefill: fused QKV projection, masked softmax attention, output projection."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 3
OP_TYPE = "causal_self_attention"
DTYPES = ["bfloat16"]
DESCRIPTION = ("Causal multi-head self-attention on bf16 x [batch_size, seq_len, d_model]: qkv = x @ W_qkv^T "
               "(W_qkv [3*d_model, d_model], rows q then k then v, head-major), per head softmax(q k^T / "
               "sqrt(head_dim) masked to keys <= query) @ v, heads concatenated, then @ W_proj^T [d_model, d_model]; "
               "no biases.")
TAGS = ["matmul", "attention", "compute-bound", "bf16", "fused", "prefill"]
SPLIT = "heldout"

batch_size = 2
seq_len = 2048    # prompt length
num_heads = 32
head_dim = 128    # d_model = 4096 (Llama-2 7B width)
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "seq_len": 13, "num_heads": 3, "head_dim": 8, "dtype": torch.float32}

# bf16 q and k (the operands of any tensor-core attention) move scores by ~2^-9 of their size;
# through softmax, P @ v and the output GEMM that puts a flash-style bf16 kernel up to ~0.009
# from this fp32 reference on an H200 (early tokens, outputs ~1); 2e-2 leaves room for it.
ATOL = 2e-2

# The production kernel this problem is timed against (issue 43): the layer as a model written for speed runs
# it (gpt-fast, nanoGPT): bf16 projections and PyTorch SDPA's FlashAttention-2 backend with is_causal.
PRODUCTION = {"sdpa_flash_layer": "bf16 F.linear projections around PyTorch SDPA (FlashAttention-2, causal)"}

# No norm precedes the projections, so a transformed x reaches q, k and v unchanged in scale:
# x*16 multiplies scores by 256 (a hard argmax whose near-ties flip under bf16 rounding), and
# x+6 adds a ~6 offset to every v whose bf16 rounding before the output GEMM leaves errors
# ~0.1 on outputs near zero. Both fail correct bf16 kernels by far, so only plain inputs.
INPUT_TRANSFORMS = ()


class Model(nn.Module):
    """proj(causal_attention(split_heads(qkv(x)))), in fp32, cast back to x's dtype."""

    def __init__(self, num_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        self.num_heads = num_heads
        d_model = num_heads * head_dim
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False, dtype=dtype)
        self.proj = nn.Linear(d_model, d_model, bias=False, dtype=dtype)
        with torch.no_grad():
            # nn.Linear's default init shrinks outputs by sqrt(3); variance-preserving weights give
            # unit q, k, v and scores of std ~1
            self.qkv.weight.normal_(0.0, d_model ** -0.5)
            self.proj.weight.normal_(0.0, d_model ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        qkv = F.linear(x.to(ct), self.qkv.weight.to(ct)).view(b, t, 3, self.num_heads, c // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [b, heads, t, head_dim]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, t, c)
        return F.linear(out, self.proj.weight.to(ct)).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, seq_len, num_heads * head_dim, dtype=dtype)]


def get_init_inputs():
    return [num_heads, head_dim, dtype]


def production_baselines(model):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(x):
        b, t, c = x.shape
        q, k, v = F.linear(x, model.qkv.weight).view(b, t, 3, model.num_heads, c // model.num_heads).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(out.transpose(1, 2).reshape(b, t, c), model.proj.weight)
    return {"sdpa_flash_layer": run}


def FLOPS():
    # projections: 2*tokens*d*(3d + d); attention over the causal half only: q.k and p.v are
    # 2*head_dim each per (head, query, key) pair, plus ~5 per score for the softmax
    d = num_heads * head_dim
    tokens = batch_size * seq_len
    pairs = batch_size * num_heads * seq_len * (seq_len + 1) // 2
    return 8 * tokens * d * d + 4 * pairs * head_dim + 5 * pairs


def BYTES():
    d = num_heads * head_dim
    return (2 * batch_size * seq_len * d + 4 * d * d) * dtype.itemsize
