# expect: correct
# problem: matmul_scale_residual
# format: load_cuda
# NVRTC loader, no tensor cores: a register-blocked fp32 tile kernel (128x128 block tile, 8x8 outputs per thread, k-slices of 8 transposed into shared memory, float4 shared loads), bf16 read as raw bits, bias + LayerScale + residual epilogue, M not a multiple of the tile
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
#define TM 128
#define TN 128
#define TK 8

__device__ __forceinline__ float bf(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ unsigned short to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                                 // round to nearest even
    return (unsigned short)(u >> 16);
}

// y = residual + gamma * (x @ w^T + bias), all [M, N] / [N] bf16, math in fp32
extern "C" __global__ void __launch_bounds__(256)
proj_layerscale_residual(const unsigned short* __restrict__ x, const unsigned short* __restrict__ w,
                         const unsigned short* __restrict__ bias, const unsigned short* __restrict__ gamma,
                         const unsigned short* __restrict__ residual, unsigned short* __restrict__ y,
                         int M, int N, int K)
{
    __shared__ __align__(16) float As[TK][TM + 4];
    __shared__ __align__(16) float Bs[TK][TN + 4];
    const int tid = threadIdx.x;
    const int ty = tid >> 4, tx = tid & 15;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    const int lr = tid >> 1, lk = (tid & 1) * 4;     // loader: row lr, k offsets lk..lk+3

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TK) {
        const int gm = m0 + lr, gn = n0 + lr;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int gk = k0 + lk + q;
            As[lk + q][lr] = (gm < M && gk < K) ? bf(x[(long long)gm * K + gk]) : 0.0f;
            Bs[lk + q][lr] = (gn < N && gk < K) ? bf(w[(long long)gn * K + gk]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[kk][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (n >= N) continue;
            const long long o = (long long)m * N + n;
            const float v = acc[i][j] + bf(bias[n]);
            y[o] = to_bf16(bf(residual[o]) + bf(gamma[n]) * v);
        }
    }
}
"""

_k = load_cuda(SRC, name="proj_layerscale_residual.cu")


class ModelNew(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=True, dtype=dtype)
        self.gamma = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        residual = residual.contiguous()
        M, K = x.shape
        N = self.proj.weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = ((N + 127) // 128, (M + 127) // 128)
        _k.proj_layerscale_residual(grid, (256,), (x, self.proj.weight, self.proj.bias, self.gamma, residual, y, M, N, K))
        return y
