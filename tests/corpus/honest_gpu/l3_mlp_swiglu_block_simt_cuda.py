# expect: correct
# problem: mlp_swiglu_block
# format: load_cuda
# NVRTC loader, four kernels in sequence (RMSNorm -> gate projection -> up projection with silu(gate)*up fused into its epilogue, in place -> down projection + residual), one templated fp32 register-blocked tile routine shared by three extern "C" entry points through epilogue functors, fp32 intermediates throughout
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
#define TM 128
#define TN 128
#define TK 8

__device__ __forceinline__ float bf16f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ unsigned short f2bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// ---- RMSNorm of bf16 rows into fp32: h = x * rsqrt(mean(x^2) + eps) * g --------------------------
extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_bf16_to_f32(const unsigned short* __restrict__ x, const unsigned short* __restrict__ g,
                    float* __restrict__ h, int n, float eps)
{
    __shared__ float red[32];
    const unsigned short* xr = x + (long long)blockIdx.x * n;
    float* hr = h + (long long)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { const float v = bf16f(xr[i]); ss += v * v; }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < (blockDim.x + 31) / 32 ? red[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
        if (threadIdx.x == 0) red[0] = t;
    }
    __syncthreads();
    const float inv = rsqrtf(red[0] / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) hr[i] = bf16f(xr[i]) * inv * bf16f(g[i]);
}

// ---- C[m, n] = sum_k A[m, k] * W[n, k]: A fp32 [M, K], W bf16 [N, K]; epi(m, n, value) stores -----------
template <typename Epi>
__device__ __forceinline__ void tile_linear(const float* __restrict__ A, const unsigned short* __restrict__ W,
                                            int M, int N, int K, const Epi& epi)
{
    __shared__ __align__(16) float As[TK][TM + 4];
    __shared__ __align__(16) float Bs[TK][TN + 4];
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    const int lr = tid >> 1, lk = (tid & 1) * 4;
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
            As[lk + q][lr] = (gm < M && gk < K) ? A[(long long)gm * K + gk] : 0.0f;
            Bs[lk + q][lr] = (gn < N && gk < K) ? bf16f(W[(long long)gn * K + gk]) : 0.0f;
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
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (m < M && n < N) epi(m, n, acc[i][j]);
        }
    }
}

struct StoreF32 {
    float* out; int N;
    __device__ void operator()(int m, int n, float v) const { out[(long long)m * N + n] = v; }
};

// act = silu(gate) * up, written over the gate buffer (each element read and written by one thread)
struct SwigluInPlace {
    float* gate; int N;
    __device__ void operator()(int m, int n, float up) const {
        const long long o = (long long)m * N + n;
        const float g = gate[o];
        gate[o] = g / (1.0f + expf(-g)) * up;
    }
};

struct ResidualBf16 {
    const unsigned short* x; unsigned short* out; int N;
    __device__ void operator()(int m, int n, float v) const {
        const long long o = (long long)m * N + n;
        out[o] = f2bf16(bf16f(x[o]) + v);
    }
};

extern "C" __global__ void __launch_bounds__(256)
linear_store_f32(const float* __restrict__ A, const unsigned short* __restrict__ W, float* __restrict__ out,
                 int M, int N, int K)
{
    tile_linear(A, W, M, N, K, StoreF32{out, N});
}

extern "C" __global__ void __launch_bounds__(256)
linear_swiglu_inplace(const float* __restrict__ A, const unsigned short* __restrict__ W, float* __restrict__ gate,
                      int M, int N, int K)
{
    tile_linear(A, W, M, N, K, SwigluInPlace{gate, N});
}

extern "C" __global__ void __launch_bounds__(256)
linear_residual_bf16(const float* __restrict__ A, const unsigned short* __restrict__ W,
                     const unsigned short* __restrict__ x, unsigned short* __restrict__ out, int M, int N, int K)
{
    tile_linear(A, W, M, N, K, ResidualBf16{x, out, N});
}
"""

mlp = load_cuda(SRC, name="mlp_swiglu_block_simt.cu")


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        hidden = x.shape[-1]
        tokens = x.numel() // hidden
        ffn = self.gate.weight.shape[0]
        h = torch.empty((tokens, hidden), dtype=torch.float32, device=x.device)
        act = torch.empty((tokens, ffn), dtype=torch.float32, device=x.device)
        out = torch.empty_like(x)

        threads = min(1024, max(32, (hidden + 3) // 4 // 32 * 32))
        mlp.rmsnorm_bf16_to_f32((tokens,), (threads,), (x, self.norm_weight, h, hidden, self.eps))
        grid_ffn = ((ffn + 127) // 128, (tokens + 127) // 128)
        mlp.linear_store_f32(grid_ffn, (256,), (h, self.gate.weight, act, tokens, ffn, hidden))
        mlp.linear_swiglu_inplace(grid_ffn, (256,), (h, self.up.weight, act, tokens, ffn, hidden))
        grid_out = ((hidden + 127) // 128, (tokens + 127) // 128)
        mlp.linear_residual_bf16(grid_out, (256,), (act, self.down.weight, x, out, tokens, hidden, ffn))
        return out
