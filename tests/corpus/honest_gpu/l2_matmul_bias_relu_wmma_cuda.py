# expect: correct
# problem: matmul_bias_relu
# format: load_cuda
# NVRTC loader with mma.h + cuda_bf16.h: bf16 tensor-core (wmma) tiles of 128x128x32 staged through padded shared memory, bias + ReLU epilogue in fp32 through a per-warp scratch tile, 2D grid tuple, nn.Linear kept as self.linear
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

KERNEL = r"""
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda;

#define BM 128
#define BN 128
#define BK 32
#define LDS (BK + 8)

__device__ __forceinline__ void stage(__nv_bfloat16 (*dst)[LDS], const __nv_bfloat16* __restrict__ src,
                                      int row0, int rows, int k0, int K)
{
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    for (int c = threadIdx.x; c < 128 * (BK / 8); c += blockDim.x) {
        const int r = c >> 2, kc = (c & 3) * 8;
        const int gr = row0 + r, gk = k0 + kc;
        const __nv_bfloat16* p = src + (long long)gr * K + gk;
        if (gr < rows && gk + 8 <= K && (((unsigned long long)p) & 15ull) == 0) {
            *reinterpret_cast<uint4*>(&dst[r][kc]) = *reinterpret_cast<const uint4*>(p);
        } else {
            for (int e = 0; e < 8; ++e) dst[r][kc + e] = (gr < rows && gk + e < K) ? p[e] : zero;
        }
    }
}

// y[m, n] = relu(sum_k x[m, k] w[n, k] + b[n]); x [M, K], w [N, K] (nn.Linear layout), bf16 in and out
extern "C" __global__ void __launch_bounds__(256)
linear_bias_relu_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                      const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ y, int M, int N, int K)
{
    __shared__ __align__(128) __nv_bfloat16 As[BM][LDS];
    __shared__ __align__(128) __nv_bfloat16 Bs[BN][LDS];
    __shared__ __align__(128) float scratch[8][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 2, wn = warp & 3;      // 2 x 4 warps, 64 x 32 each
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        stage(As, x, m0, M, k0, K);
        stage(Bs, w, n0, N, k0, K);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a[i], &As[wm * 64 + i * 16][kk], LDS);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[wn * 32 + j * 16][kk], LDS);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(scratch[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int gm = m0 + wm * 64 + i * 16 + (e >> 4);
                const int gn = n0 + wn * 32 + j * 16 + (e & 15);
                if (gm < M && gn < N) {
                    const float v = scratch[warp][e] + __bfloat162float(bias[gn]);
                    y[(long long)gm * N + gn] = __float2bfloat16_rn(fmaxf(v, 0.0f));
                }
            }
            __syncwarp();
        }
    }
}
"""

mod = load_cuda(KERNEL, name="linear_bias_relu_wmma.cu")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        b = self.linear.bias.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = ((N + 127) // 128, (M + 127) // 128)
        mod.linear_bias_relu_bf16(grid, (256,), (x, w, b, y, M, N, K))
        return y
