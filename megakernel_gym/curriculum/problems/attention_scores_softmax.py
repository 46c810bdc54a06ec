"""Causal attention probabilities softmax(q k^T / sqrt(d) + mask) of a chunked-prefill step (eager attention)."""
import math

import torch
import torch.nn as nn

LEVEL = 2
OP_TYPE = "attention_scores_softmax"
DTYPES = ["bfloat16"]
DESCRIPTION = ("p = softmax(q k^T / sqrt(head_dim) + causal mask) for bf16 q [batch_size, num_heads, q_len, "
               "head_dim] and k [batch_size, num_heads, kv_len, head_dim]; the q_len queries are the last "
               "positions of the kv_len keys, so query i sees keys j <= kv_len - q_len + i; scores and softmax "
               "in fp32, p [batch_size, num_heads, q_len, kv_len] in bf16.")
TAGS = ["attention", "memory-bound", "bf16", "fused", "reduction"]
SPLIT = "heldout"

batch_size = 2
num_heads = 32
q_len = 1024     # new tokens in this prefill chunk
kv_len = 4096    # 3072 cached tokens + the chunk itself; p is 512 MiB in bf16
head_dim = 128
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 1, "num_heads": 2, "q_len": 13, "kv_len": 37, "head_dim": 12, "dtype": torch.float32}

# Most probabilities are far below the bf16 default atol of 1e-2 (a row spreads over up to
# 4096 keys), which would let an all-zero output pass; rtol still covers bf16 rounding.
ATOL = 1e-5


def _scores_fp32(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Batched q @ k^T in fp32 (fp64 for fp64 inputs): a bf16 GEMM accumulates in fp32, and its
    result is kept unrounded (a bf16 rounding of a score of 4 moves its probability by ~1%)."""
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16):
        return torch.bmm(q, k.transpose(1, 2), out_dtype=torch.float32)
    wide = torch.promote_types(q.dtype, torch.float32)
    return torch.bmm(q.to(wide), k.to(wide).transpose(1, 2))


class Model(nn.Module):
    """Unrounded fp32 scores, scaled, masked and softmaxed in fp32, then rounded once."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        b, h, s_q, d = q.shape
        s_k = k.shape[-2]
        scores = _scores_fp32(q.reshape(b * h, s_q, d), k.reshape(b * h, s_k, d))
        scores = scores.reshape(b, h, s_q, s_k) * (1.0 / math.sqrt(d))
        future = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(s_k - s_q + 1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1).to(q.dtype)


def get_inputs():
    q = torch.randn(batch_size, num_heads, q_len, head_dim, dtype=dtype)
    k = torch.randn(batch_size, num_heads, kv_len, head_dim, dtype=dtype)
    return [q, k]


def get_init_inputs():
    return []


def FLOPS():
    # q.k is 2*head_dim per score (masked ones included: a dense kernel computes them), the scale and
    # softmax ~6 more
    scores = batch_size * num_heads * q_len * kv_len
    return 2 * scores * head_dim + 6 * scores


def BYTES():
    # q and k read once, p written once; writing p dominates
    return (batch_size * num_heads * (q_len + kv_len) * head_dim
            + batch_size * num_heads * q_len * kv_len) * dtype.itemsize
