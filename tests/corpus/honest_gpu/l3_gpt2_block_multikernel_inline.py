# expect: correct
# problem: gpt2_block
# format: load_inline
# a full GPT-2 block from one host wrapper launching seven kernels: a templated LayerNorm (fp16 or fp32 rows in), one register-blocked fp32 tile kernel with a template epilogue (bias / residual / tanh-GELU / fp16 store), and a causal attention kernel with one warp per query and an online softmax; fp16 weights through data_ptr<at::Half>(), intermediates in fp32
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

gpt2_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define CHECK_CUDA(x) TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor")

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

// ---------------- LayerNorm: rows of In -> fp32 --------------------------------------------------------------
template <typename In>
__global__ void layernorm_rows_kernel(const In* __restrict__ x, const __half* __restrict__ w, const __half* __restrict__ b,
                                      float* __restrict__ y, int d, float eps) {
    __shared__ float red[32];
    const In* xr = x + (size_t)blockIdx.x * d;
    float* yr = y + (size_t)blockIdx.x * d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;

    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += to_f(xr[i]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = 0.0f;
    for (int i = 0; i < nwarps; ++i) s += red[i];
    const float mean = s / d;
    __syncthreads();

    float v = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) { const float t = to_f(xr[i]) - mean; v += t * t; }
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = 0.0f;
    for (int i = 0; i < nwarps; ++i) v += red[i];
    const float rstd = rsqrtf(v / d + eps);

    for (int i = threadIdx.x; i < d; i += blockDim.x)
        yr[i] = (to_f(xr[i]) - mean) * rstd * __half2float(w[i]) + __half2float(b[i]);
}

// ---------------- tile kernel: out = epi(A @ W^T + bias), A fp32 [M, K], W fp16 [N, K] ---------------------
enum Epilogue { EPI_BIAS = 0, EPI_BIAS_RES_HALF = 1, EPI_BIAS_GELU = 2, EPI_BIAS_RES_F32_TO_HALF = 3 };

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k_beta = 0.7978845608028654f;   // sqrt(2 / pi)
    const float k_kappa = 0.044715f;
    const float inner = k_beta * (x + k_kappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

template <int EPI>
__global__ void __launch_bounds__(256) linear_tile_kernel(const float* __restrict__ A, const __half* __restrict__ W,
                                                          const __half* __restrict__ bias, const void* __restrict__ res,
                                                          void* __restrict__ out, int M, int N, int K) {
    constexpr int TM = 128, TN = 128, TK = 8;
    __shared__ __align__(16) float As[TK][TM + 4];
    __shared__ __align__(16) float Bs[TK][TN + 4];
    const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    const int lr = tid >> 1, lk = (tid & 1) * 4;
    float acc[8][8] = {};

    for (int k0 = 0; k0 < K; k0 += TK) {
        const int gm = m0 + lr, gn = n0 + lr;
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int gk = k0 + lk + q;
            As[lk + q][lr] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : 0.0f;
            Bs[lk + q][lr] = (gn < N && gk < K) ? __half2float(W[(size_t)gn * K + gk]) : 0.0f;
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
            if (m >= M || n >= N) continue;
            const size_t o = (size_t)m * N + n;
            const float v = acc[i][j] + __half2float(bias[n]);
            if (EPI == EPI_BIAS) {
                static_cast<float*>(out)[o] = v;
            } else if (EPI == EPI_BIAS_RES_HALF) {
                static_cast<float*>(out)[o] = __half2float(static_cast<const __half*>(res)[o]) + v;
            } else if (EPI == EPI_BIAS_GELU) {
                static_cast<float*>(out)[o] = gelu_tanh(v);
            } else {
                static_cast<__half*>(out)[o] = __float2half_rn(static_cast<const float*>(res)[o] + v);
            }
        }
    }
}

// ---------------- causal attention: one warp per (batch, head, query), online softmax -----------------------
// qkv: [B, T, 3, H, Dh] fp32 (the c_attn output viewed as q, k, v); out: [B, T, H * Dh]
#define DH_MAX 128
__global__ void causal_attention_kernel(const float* __restrict__ qkv, float* __restrict__ out,
                                        int T, int H, int Dh, float scale) {
    const int warps = blockDim.x / 32;
    const int t = blockIdx.x * warps + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31;
    if (t >= T) return;
    const int d_model = H * Dh;
    const size_t row_stride = 3 * (size_t)d_model;
    const float* base = qkv + (size_t)b * T * row_stride;
    const float* qrow = base + (size_t)t * row_stride + h * Dh;

    constexpr int PER_LANE = DH_MAX / 32;
    float q[PER_LANE], acc[PER_LANE];
    #pragma unroll
    for (int e = 0; e < PER_LANE; ++e) {
        const int d = lane + 32 * e;
        q[e] = d < Dh ? qrow[d] * scale : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; ++j) {
        const float* krow = base + (size_t)j * row_stride + d_model + h * Dh;
        float s = 0.0f;
        #pragma unroll
        for (int e = 0; e < PER_LANE; ++e) {
            const int d = lane + 32 * e;
            if (d < Dh) s += q[e] * krow[d];
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);       // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
        const float* vrow = krow + d_model;
        #pragma unroll
        for (int e = 0; e < PER_LANE; ++e) {
            const int d = lane + 32 * e;
            if (d < Dh) acc[e] = acc[e] * corr + p * vrow[d];
        }
        m = m_new;
    }
    float* orow = out + ((size_t)b * T + t) * d_model + h * Dh;
    const float inv_l = 1.0f / l;
    #pragma unroll
    for (int e = 0; e < PER_LANE; ++e) {
        const int d = lane + 32 * e;
        if (d < Dh) orow[d] = acc[e] * inv_l;
    }
}

static void launch_linear(int epi, const torch::Tensor& a, const torch::Tensor& w, const torch::Tensor& bias,
                          const void* res, void* out) {
    const int M = a.size(0), K = a.size(1), N = w.size(0);
    dim3 grid((N + 127) / 128, (M + 127) / 128);
    const float* ap = a.data_ptr<float>();
    const __half* wp = reinterpret_cast<const __half*>(w.data_ptr<at::Half>());
    const __half* bp = reinterpret_cast<const __half*>(bias.data_ptr<at::Half>());
    switch (epi) {
        case EPI_BIAS: linear_tile_kernel<EPI_BIAS><<<grid, 256>>>(ap, wp, bp, res, out, M, N, K); break;
        case EPI_BIAS_RES_HALF: linear_tile_kernel<EPI_BIAS_RES_HALF><<<grid, 256>>>(ap, wp, bp, res, out, M, N, K); break;
        case EPI_BIAS_GELU: linear_tile_kernel<EPI_BIAS_GELU><<<grid, 256>>>(ap, wp, bp, res, out, M, N, K); break;
        default: linear_tile_kernel<EPI_BIAS_RES_F32_TO_HALF><<<grid, 256>>>(ap, wp, bp, res, out, M, N, K); break;
    }
}

torch::Tensor gpt2_block_forward(torch::Tensor x,
                                 torch::Tensor ln1_w, torch::Tensor ln1_b, torch::Tensor attn_w, torch::Tensor attn_b,
                                 torch::Tensor proj_w, torch::Tensor proj_b, torch::Tensor ln2_w, torch::Tensor ln2_b,
                                 torch::Tensor fc_w, torch::Tensor fc_b, torch::Tensor mlp_w, torch::Tensor mlp_b,
                                 int64_t num_heads, double eps) {
    CHECK_CUDA(x);
    TORCH_CHECK(x.scalar_type() == torch::kHalf, "x must be float16");
    x = x.contiguous();
    const int B = x.size(0), T = x.size(1), D = x.size(2);
    const int H = (int)num_heads, Dh = D / H;
    TORCH_CHECK(Dh <= DH_MAX, "head_dim above ", DH_MAX, " is not supported");
    const int tokens = B * T;
    const int F4 = fc_w.size(0);
    auto f32 = x.options().dtype(torch::kFloat32);

    auto n1 = torch::empty({tokens, D}, f32);
    auto qkv = torch::empty({tokens, 3 * D}, f32);
    auto attn = torch::empty({tokens, D}, f32);
    auto h = torch::empty({tokens, D}, f32);
    auto n2 = torch::empty({tokens, D}, f32);
    auto mid = torch::empty({tokens, F4}, f32);
    auto out = torch::empty({B, T, D}, x.options());

    const __half* xh = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
    layernorm_rows_kernel<__half><<<tokens, 256>>>(xh, reinterpret_cast<const __half*>(ln1_w.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(ln1_b.data_ptr<at::Half>()), n1.data_ptr<float>(), D, (float)eps);
    launch_linear(EPI_BIAS, n1, attn_w, attn_b, nullptr, qkv.data_ptr<float>());

    const int warps_per_block = 4;
    dim3 agrid((T + warps_per_block - 1) / warps_per_block, H, B);
    causal_attention_kernel<<<agrid, 32 * warps_per_block>>>(qkv.data_ptr<float>(), attn.data_ptr<float>(), T, H, Dh,
                                                             1.0f / sqrtf((float)Dh));
    launch_linear(EPI_BIAS_RES_HALF, attn, proj_w, proj_b, xh, h.data_ptr<float>());

    layernorm_rows_kernel<float><<<tokens, 256>>>(h.data_ptr<float>(), reinterpret_cast<const __half*>(ln2_w.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(ln2_b.data_ptr<at::Half>()), n2.data_ptr<float>(), D, (float)eps);
    launch_linear(EPI_BIAS_GELU, n2, fc_w, fc_b, nullptr, mid.data_ptr<float>());
    launch_linear(EPI_BIAS_RES_F32_TO_HALF, mid, mlp_w, mlp_b, h.data_ptr<float>(), out.data_ptr<at::Half>());

    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "gpt2 block kernels: ", cudaGetErrorString(err));
    return out;
}
"""

gpt2_cpp_source = """
torch::Tensor gpt2_block_forward(torch::Tensor x,
                                 torch::Tensor ln1_w, torch::Tensor ln1_b, torch::Tensor attn_w, torch::Tensor attn_b,
                                 torch::Tensor proj_w, torch::Tensor proj_b, torch::Tensor ln2_w, torch::Tensor ln2_b,
                                 torch::Tensor fc_w, torch::Tensor fc_b, torch::Tensor mlp_w, torch::Tensor mlp_b,
                                 int64_t num_heads, double eps);
"""

gpt2_ext = load_inline(
    name="gpt2_block_multikernel",
    cpp_sources=gpt2_cpp_source,
    cuda_sources=gpt2_cuda_source,
    functions=["gpt2_block_forward"],
    verbose=False,
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        d = num_heads * head_dim
        self.num_heads = num_heads
        self.eps = eps
        self.ln_1 = nn.LayerNorm(d, eps=eps, dtype=dtype)
        self.c_attn = nn.Linear(d, 3 * d, dtype=dtype)
        self.c_proj = nn.Linear(d, d, dtype=dtype)
        self.ln_2 = nn.LayerNorm(d, eps=eps, dtype=dtype)
        self.c_fc = nn.Linear(d, 4 * d, dtype=dtype)
        self.mlp_proj = nn.Linear(4 * d, d, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gpt2_ext.gpt2_block_forward(
            x,
            self.ln_1.weight, self.ln_1.bias, self.c_attn.weight, self.c_attn.bias,
            self.c_proj.weight, self.c_proj.bias, self.ln_2.weight, self.ln_2.bias,
            self.c_fc.weight, self.c_fc.bias, self.mlp_proj.weight, self.mlp_proj.bias,
            self.num_heads, self.eps,
        )


batch_size = 8
seq_len = 1024
num_heads = 16
head_dim = 64
eps = 1e-5
dtype = torch.float16


def get_inputs():
    return [torch.randn(batch_size, seq_len, num_heads * head_dim, dtype=dtype)]


def get_init_inputs():
    return [num_heads, head_dim, eps, dtype]
