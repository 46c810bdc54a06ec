# problem: level1/32_HardTanh.py
# kind: cuda
# HardTanh elementwise in fp32 with min_val=-1, max_val=1 (clamp; NaN passes through like torch); float4 grid-stride loop when 16-byte aligned (checked in-kernel), 64-bit n
# cpu_sizes: {"batch_size": 5, "dim": 333}
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
__device__ __forceinline__ float op(float x) {
    return x < -1.0f ? -1.0f : (x > 1.0f ? 1.0f : x);
}

// grid-stride, 64-bit indices; when x and y are 16-byte aligned (checked here, uniform across the grid):
// float4 loads/stores over the first n/4 groups, then the n % 4 tail; otherwise one element per step
extern "C" __global__ void hardtanh_f32(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (((((unsigned long long)x) | ((unsigned long long)y)) & 15ull) == 0ull) {
        const long long n4 = n >> 2;
        const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
        float4* __restrict__ y4 = reinterpret_cast<float4*>(y);
        for (long long i = i0; i < n4; i += stride) {
            float4 v = x4[i];
            v.x = op(v.x); v.y = op(v.y); v.z = op(v.z); v.w = op(v.w);
            y4[i] = v;
        }
        for (long long i = (n4 << 2) + i0; i < n; i += stride) y[i] = op(x[i]);
    } else {
        for (long long i = i0; i < n; i += stride) y[i] = op(x[i]);
    }
}
"""

_mod = load_cuda(SRC, name="hardtanh_f32.cu")
_THREADS = 256
_MAX_BLOCKS = 1 << 20


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError("this kernel handles float32 tensors")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        work = (n + 3) // 4          # float4 groups (the unaligned path strides over the same grid)
        blocks = min((work + _THREADS - 1) // _THREADS, _MAX_BLOCKS)
        _mod.hardtanh_f32((blocks,), (_THREADS,), (x, y, n))
        return y
