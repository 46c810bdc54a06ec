# expect: correct
# problem: matmul_softmax
# format: load_inline
# two kernels in sequence: a bf16 tensor-core (nvcuda::wmma, fp32 accumulate) x @ W^T tile kernel writing fp32 logits, then a warp-per-row softmax in place; output allocated with x.options().dtype(torch::kFloat32), dim3 grid, weights from the kept nn.Linear (gate)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

router_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>

using namespace nvcuda;

#define BM 128
#define BN 128
#define BK 32
#define LDS (BK + 8)   // padded row: fewer bank conflicts, still a multiple of 8 elements for wmma

// Copy a [128 x BK] tile of a row-major [rows x K] bf16 matrix into shared memory, zero-filling
// rows past the end and columns past K.
__device__ __forceinline__ void load_tile(__nv_bfloat16 (*dst)[LDS], const __nv_bfloat16* __restrict__ src,
                                          int row0, int rows, int k0, int K) {
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    for (int c = threadIdx.x; c < 128 * (BK / 8); c += blockDim.x) {
        const int r = c / (BK / 8);
        const int kc = (c % (BK / 8)) * 8;
        const int gr = row0 + r, gk = k0 + kc;
        const __nv_bfloat16* p = src + (size_t)gr * K + gk;
        if (gr < rows && gk + 8 <= K && (reinterpret_cast<size_t>(p) & 15) == 0) {
            *reinterpret_cast<uint4*>(&dst[r][kc]) = *reinterpret_cast<const uint4*>(p);
        } else {
            #pragma unroll
            for (int e = 0; e < 8; ++e) dst[r][kc + e] = (gr < rows && gk + e < K) ? p[e] : zero;
        }
    }
}

// logits[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation on tensor cores.
// 8 warps per block as 2 (rows) x 4 (cols); each warp owns a 64 x 32 patch = 4 x 2 fragments.
__global__ void __launch_bounds__(256) router_logits_wmma_kernel(const __nv_bfloat16* __restrict__ x,
                                                                 const __nv_bfloat16* __restrict__ w,
                                                                 float* __restrict__ logits, int M, int N, int K) {
    __shared__ __align__(128) __nv_bfloat16 As[BM][LDS];
    __shared__ __align__(128) __nv_bfloat16 Bs[BN][LDS];
    __shared__ __align__(128) float scratch[8][16 * 16];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile(As, x, m0, M, k0, K);
        load_tile(Bs, w, n0, N, k0, K);
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
                const int gm = m0 + wm * 64 + i * 16 + e / 16;
                const int gn = n0 + wn * 32 + j * 16 + e % 16;
                if (gm < M && gn < N) logits[(size_t)gm * N + gn] = scratch[warp][e];
            }
            __syncwarp();
        }
    }
}

// In-place softmax over each row of p [M, N]; one warp per row.
__global__ void softmax_rows_inplace_kernel(float* __restrict__ p, int M, int N) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= M) return;
    float* pr = p + (size_t)row * N;
    float mx = -INFINITY;
    for (int c = lane; c < N; c += 32) mx = fmaxf(mx, pr[c]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, off));
    float sum = 0.0f;
    for (int c = lane; c < N; c += 32) sum += expf(pr[c] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
    const float inv = 1.0f / sum;
    for (int c = lane; c < N; c += 32) pr[c] = expf(pr[c] - mx) * inv;
}

torch::Tensor router_softmax(torch::Tensor x, torch::Tensor w) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), "x and w must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16, "bf16 inputs expected");
    x = x.contiguous();
    w = w.contiguous();
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    TORCH_CHECK(w.size(1) == K, "x and w disagree on the hidden size");
    auto probs = torch::empty({M, N}, x.options().dtype(torch::kFloat32));

    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    router_logits_wmma_kernel<<<grid, 256>>>(
        reinterpret_cast<const __nv_bfloat16*>(x.data_ptr<at::BFloat16>()),
        reinterpret_cast<const __nv_bfloat16*>(w.data_ptr<at::BFloat16>()), probs.data_ptr<float>(), M, N, K);
    const int rows_per_block = 8;
    softmax_rows_inplace_kernel<<<(M + rows_per_block - 1) / rows_per_block, 32 * rows_per_block>>>(
        probs.data_ptr<float>(), M, N);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "router kernels: ", cudaGetErrorString(err));
    return probs;
}
"""

router_cpp = "torch::Tensor router_softmax(torch::Tensor x, torch::Tensor w);"

router_ext = load_inline(
    name="router_matmul_softmax_wmma",
    cpp_sources=router_cpp,
    cuda_sources=router_source,
    functions=["router_softmax"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, num_experts: int, dtype: torch.dtype):
        super().__init__()
        self.gate = nn.Linear(hidden, num_experts, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return router_ext.router_softmax(x, self.gate.weight)


batch_size = 8192
hidden = 4096
num_experts = 128
dtype = torch.bfloat16


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, num_experts, dtype]
