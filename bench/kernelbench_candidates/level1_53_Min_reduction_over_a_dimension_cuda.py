# problem: level1/53_Min_reduction_over_a_dimension.py
# kind: cuda
# min over any dim (x viewed as (outer, R, inner)): inner > 1 uses 32x8 blocks (32 adjacent columns, 8 row slices) then a shared-memory tree over the slices; inner == 1 uses one 256-thread block per row with warp shuffles; NaN propagates like torch; 64-bit offsets
# cpu_sizes: {"batch_size": 3, "dim1": 70, "dim2": 45}
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
#define POS_INF __int_as_float(0x7f800000)

// min that keeps a NaN from either side (torch.min propagates NaN)
__device__ __forceinline__ float nan_min(float a, float b) { return (b < a || b != b) ? b : a; }

// x: (outer, R, inner) contiguous, inner > 1. Block (32, 8): threadIdx.x picks a column, threadIdx.y a
// slice of R (r = ty, ty + 8, ...); the 8 partials of a column are combined by a tree in shared memory.
extern "C" __global__ void min_mid_f32(const float* __restrict__ x, float* __restrict__ out,
                                       long long R, long long inner, long long n_col_blocks)
{
    __shared__ float part[8][33];
    const long long b = blockIdx.x;
    const long long o = b / n_col_blocks;
    const long long col = (b - o * n_col_blocks) * 32 + threadIdx.x;
    const int ty = threadIdx.y;
    float m = POS_INF;
    if (col < inner) {
        const float* __restrict__ p = x + o * R * inner + col;
#pragma unroll 4
        for (long long r = ty; r < R; r += 8) m = nan_min(m, p[r * inner]);
    }
    part[ty][threadIdx.x] = m;
    __syncthreads();
    for (int s = 4; s > 0; s >>= 1) {
        if (ty < s) part[ty][threadIdx.x] = nan_min(part[ty][threadIdx.x], part[ty + s][threadIdx.x]);
        __syncthreads();
    }
    if (ty == 0 && col < inner) out[o * inner + col] = part[0][threadIdx.x];
}

// x: (rows, R) contiguous (reduction over the last dim). One 256-thread block per row.
extern "C" __global__ void min_last_f32(const float* __restrict__ x, float* __restrict__ out, long long R)
{
    __shared__ float warp_part[8];
    const long long row = blockIdx.x;
    const float* __restrict__ p = x + row * R;
    float m = POS_INF;
    for (long long r = threadIdx.x; r < R; r += blockDim.x) m = nan_min(m, p[r]);
    for (int off = 16; off > 0; off >>= 1) m = nan_min(m, __shfl_xor_sync(0xffffffffu, m, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_part[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)(blockDim.x >> 5) ? warp_part[lane] : POS_INF;
        for (int off = 16; off > 0; off >>= 1) m = nan_min(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0) out[row] = m;
    }
}
"""

_mod = load_cuda(SRC, name="min_reduce_dim.cu")


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError("this kernel handles float32 tensors")
        x = x.contiguous()
        dim = self.dim % x.dim()
        shape = list(x.shape)
        R = shape[dim]
        if R == 0:
            raise RuntimeError("min(): cannot reduce over a zero-size dimension")
        outer = 1
        for s in shape[:dim]:
            outer *= s
        inner = 1
        for s in shape[dim + 1:]:
            inner *= s
        out = torch.empty(shape[:dim] + shape[dim + 1:], dtype=x.dtype, device=x.device)
        if outer * inner == 0:
            return out
        if inner == 1:
            _mod.min_last_f32((outer,), (256,), (x, out, R))
        else:
            n_col_blocks = (inner + 31) // 32
            _mod.min_mid_f32((outer * n_col_blocks,), (32, 8), (x, out, R, inner, n_col_blocks))
        return out
