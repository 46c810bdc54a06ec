# expect: correct
# problem: max_reduce
# format: load_cuda
# NVRTC loader: one warp per row, bf16 handled as raw 16-bit patterns (unsigned short*), 16-byte loads of 8 values, __shfl_xor_sync max; separate fp32 kernel picked by dtype
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <cmath> INFINITY)
__device__ __forceinline__ float bf16_to_float(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

extern "C" __global__ void rowmax_bf16(const unsigned short* __restrict__ x, unsigned short* __restrict__ out,
                                       int rows, int cols)
{
    const int warps = blockDim.x >> 5;
    const int row = blockIdx.x * warps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const unsigned short* xr = x + (long long)row * cols;
    float m = NEG_INF;
    // 8 bf16 per 16-byte load when the row start is aligned; the rest one by one
    int done = 0;
    if ((((unsigned long long)xr) & 15ull) == 0) {
        const int nvec = cols >> 3;
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        for (int i = lane; i < nvec; i += 32) {
            uint4 r = xv[i];
            unsigned int w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                m = fmaxf(m, __uint_as_float(w[j] << 16));
                m = fmaxf(m, __uint_as_float(w[j] & 0xffff0000u));
            }
        }
        done = nvec << 3;
    }
    for (int i = done + lane; i < cols; i += 32) m = fmaxf(m, bf16_to_float(xr[i]));
    m = warp_max(m);
    // the max of bf16 values is a bf16 value: its top 16 bits are exact
    if (lane == 0) out[row] = (unsigned short)(__float_as_uint(m) >> 16);
}

extern "C" __global__ void rowmax_f32(const float* __restrict__ x, float* __restrict__ out, int rows, int cols)
{
    const int warps = blockDim.x >> 5;
    const int row = blockIdx.x * warps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + (long long)row * cols;
    float m = NEG_INF;
    for (int i = lane; i < cols; i += 32) m = fmaxf(m, xr[i]);
    m = warp_max(m);
    if (lane == 0) out[row] = m;
}
"""

_mod = load_cuda(SRC, name="rowmax_warp.cu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xc = x.contiguous()
        cols = xc.shape[-1]
        rows = xc.numel() // cols
        out = torch.empty(xc.shape[:-1], dtype=xc.dtype, device=xc.device)
        rows_per_block = 8  # 256 threads, one warp per row
        grid = ((rows + rows_per_block - 1) // rows_per_block,)
        if xc.dtype == torch.bfloat16:
            _mod.rowmax_bf16(grid, (256,), (xc, out, rows, cols))
        else:
            _mod.rowmax_f32(grid, (256,), (xc, out, rows, cols))
        return out
