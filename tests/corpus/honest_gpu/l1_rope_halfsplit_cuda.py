# expect: correct
# problem: rope
# format: load_cuda
# NVRTC loader with cuda_bf16.h: one thread per rotated pair (i, i + head_dim/2), fp32 cos/sin tables kept as buffers of the same names (filled from the reference's state_dict), 64-bit flat indexing
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

ROPE_SRC = r"""
#include <cuda_bf16.h>

extern "C" __global__ void rope_halfsplit_bf16(const __nv_bfloat16* __restrict__ q, const float* __restrict__ cos_t,
                                               const float* __restrict__ sin_t, __nv_bfloat16* __restrict__ out,
                                               long long n_pairs, int seq_len, int half)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_pairs) return;
    const long long row = p / half;        // (batch, head, position) flattened
    const int i = (int)(p - row * half);
    const int pos = (int)(row % seq_len);
    const long long base = row * (2LL * half);
    const float x1 = __bfloat162float(q[base + i]);
    const float x2 = __bfloat162float(q[base + half + i]);
    const float c = cos_t[pos * half + i];
    const float s = sin_t[pos * half + i];
    out[base + i] = __float2bfloat16_rn(x1 * c - x2 * s);
    out[base + half + i] = __float2bfloat16_rn(x2 * c + x1 * s);
}

extern "C" __global__ void rope_halfsplit_f32(const float* __restrict__ q, const float* __restrict__ cos_t,
                                              const float* __restrict__ sin_t, float* __restrict__ out,
                                              long long n_pairs, int seq_len, int half)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_pairs) return;
    const long long row = p / half;
    const int i = (int)(p - row * half);
    const int pos = (int)(row % seq_len);
    const long long base = row * (2LL * half);
    const float x1 = q[base + i], x2 = q[base + half + i];
    const float c = cos_t[pos * half + i], s = sin_t[pos * half + i];
    out[base + i] = x1 * c - x2 * s;
    out[base + half + i] = x2 * c + x1 * s;
}
"""

rope_mod = load_cuda(ROPE_SRC, name="rope_halfsplit.cu")


class ModelNew(nn.Module):
    def __init__(self, seq_len: int, head_dim: int, rope_base: float):
        super().__init__()
        # same buffer names and shapes as the reference; the judge loads its values
        self.register_buffer("cos", torch.empty(seq_len, head_dim // 2, dtype=torch.float32))
        self.register_buffer("sin", torch.empty(seq_len, head_dim // 2, dtype=torch.float32))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        q = q.contiguous()
        out = torch.empty_like(q)
        seq_len, head_dim = q.shape[-2], q.shape[-1]
        half = head_dim // 2
        n_pairs = q.numel() // 2
        threads = 256
        grid = ((n_pairs + threads - 1) // threads,)
        kernel = rope_mod.rope_halfsplit_bf16 if q.dtype == torch.bfloat16 else rope_mod.rope_halfsplit_f32
        kernel(grid, (threads,), (q, self.cos, self.sin, out, n_pairs, seq_len, half))
        return out
