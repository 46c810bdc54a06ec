"""Fused QKV projection then rotary embedding on q and k: the start of every Llama-3 attention layer."""
import torch
import torch.nn as nn

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "qkv_proj_rope"
DTYPES = ["bfloat16"]
DESCRIPTION = ("qkv = x @ W^T for bf16 x [num_tokens, hidden], W [(num_q_heads + 2*num_kv_heads)*head_dim, hidden] "
               "(q, k, v stacked in that order); then NeoX rotary embedding (pairs i, i + head_dim/2; "
               "theta=500000) on q and k at each token's int64 position; returns q [num_tokens, num_q_heads, "
               "head_dim], k and v [num_tokens, num_kv_heads, head_dim], bf16.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "attention"]
SPLIT = "heldout"

num_tokens = 4096    # tokens from many sequences, flattened as a serving engine batches them
hidden = 4096        # Llama-3 8B
num_q_heads = 32
num_kv_heads = 8
head_dim = 128
rope_theta = 500000.0
max_position = 8192  # positions are drawn from [0, max_position)
dtype = torch.bfloat16

# head_dim must be even; 12 is not a multiple of 16
CPU_SIZES = {"num_tokens": 13, "hidden": 36, "num_q_heads": 3, "num_kv_heads": 1, "head_dim": 12,
             "max_position": 50, "dtype": torch.float32}


def _rotate(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    t1, t2 = t[..., :half], t[..., half:]
    return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)


class Model(nn.Module):
    """One GEMM, then the rotation in fp32 with fp64-accurate angles."""

    def __init__(self, hidden: int, num_q_heads: int, num_kv_heads: int, head_dim: int, theta: float,
                 dtype: torch.dtype):
        super().__init__()
        self.heads = (num_q_heads, num_kv_heads, head_dim)
        self.theta = theta
        self.qkv_proj = nn.Linear(hidden, (num_q_heads + 2 * num_kv_heads) * head_dim, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor):
        hq, hkv, d = self.heads
        qkv = _matmul_fp32(x, self.qkv_proj.weight)
        wide = qkv.dtype
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        # angles in fp64: position * frequency reaches thousands of radians, where fp32 loses ~1e-3
        inv_freq = self.theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
        angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
        cos = angles.cos().to(wide)[:, None, :]
        sin = angles.sin().to(wide)[:, None, :]
        q = _rotate(q.reshape(-1, hq, d), cos, sin)
        k = _rotate(k.reshape(-1, hkv, d), cos, sin)
        return q.to(x.dtype), k.to(x.dtype), v.reshape(-1, hkv, d).contiguous().to(x.dtype)


def get_inputs():
    x = torch.randn(num_tokens, hidden, dtype=dtype)
    positions = torch.randint(0, max_position, (num_tokens,), dtype=torch.int64)
    return [x, positions]


def get_init_inputs():
    return [hidden, num_q_heads, num_kv_heads, head_dim, rope_theta, dtype]


def FLOPS():
    # the product, then 3 per rotated element (two multiplies and an add); cos/sin are per token
    # and frequency, shared by every head
    qkv_width = (num_q_heads + 2 * num_kv_heads) * head_dim
    rotated = num_tokens * (num_q_heads + num_kv_heads) * head_dim
    return 2 * num_tokens * hidden * qkv_width + 3 * rotated


def BYTES():
    qkv_width = (num_q_heads + 2 * num_kv_heads) * head_dim
    return ((num_tokens * hidden + qkv_width * hidden + num_tokens * qkv_width) * dtype.itemsize
            + num_tokens * 8)
