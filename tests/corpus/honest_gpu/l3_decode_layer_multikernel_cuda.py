# expect: correct
# problem: decode_layer
# format: load_cuda
# NVRTC loader, a whole Llama decode step as nine launches: RMSNorm, batched weight-streaming row-dot kernels (one warp per weight row, activations staged in shared memory, 16-byte bf16 weight loads), RoPE at the cache position, GQA attention over the bf16 cache plus the new fp32 key/value with dynamic shared memory, fused SwiGLU, residual epilogues; returns three tensors
import math

import torch
import torch.nn as nn

from megakernel_gym import load_cuda

DECODE_SRC = r"""
#define NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no <cmath> INFINITY)
#include <cuda_bf16.h>

#define FULL 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    return v;
}

__device__ __forceinline__ float ldf(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ldf(const __nv_bfloat16* p, long long i) { return __bfloat162float(p[i]); }

// ---- RMSNorm rows into fp32 (and, for bf16 input, an fp32 copy of x for the residual) -----------------------
template <typename T>
__device__ __forceinline__ void rmsnorm_row(const T* __restrict__ x, const __nv_bfloat16* __restrict__ g,
                                            float* __restrict__ out, float* __restrict__ xcopy, int n, float eps)
{
    __shared__ float red[32];
    const long long base = (long long)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { const float v = ldf(x, base + i); ss += v * v; }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < (blockDim.x + 31) / 32 ? red[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0) red[0] = t;
    }
    __syncthreads();
    const float inv = rsqrtf(red[0] / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = ldf(x, base + i);
        out[base + i] = v * inv * __bfloat162float(g[i]);
        if (xcopy) xcopy[base + i] = v;
    }
}

extern "C" __global__ void rmsnorm_in_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ g,
                                           float* __restrict__ out, float* __restrict__ xcopy, int n, float eps)
{
    rmsnorm_row(x, g, out, xcopy, n, eps);
}

extern "C" __global__ void rmsnorm_in_f32(const float* __restrict__ x, const __nv_bfloat16* __restrict__ g,
                                          float* __restrict__ out, int n, float eps)
{
    rmsnorm_row(x, g, out, (float*)0, n, eps);
}

// ---- batched row dots: acc[b] = sum_k A[b, k] * W[n, k]; one warp per weight row n, 8 rows per block ----
#define ROWS 8
#define KC 256
#define MAXB 16

// Adds this warp's share of the chunk [k0, k0 + KC) of row w into acc (As holds A[b0.., k0..]).
__device__ __forceinline__ void dot_chunk(const __nv_bfloat16* __restrict__ w, int k0, int K,
                                          float (*As)[KC], int nb, float* acc)
{
    const int lane = threadIdx.x & 31;
    const int kk = lane * 8;
    const int k = k0 + kk;
    if (k >= K) return;
    float wf[8];
    if (k + 8 <= K && (((unsigned long long)(w + k)) & 15ull) == 0) {
        const uint4 raw = *reinterpret_cast<const uint4*>(w + k);
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) { const float2 f = __bfloat1622float2(p[e]); wf[2 * e] = f.x; wf[2 * e + 1] = f.y; }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) wf[e] = (k + e < K) ? __bfloat162float(w[k + e]) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < MAXB; ++b) {
        if (b < nb) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[b][kk]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[b][kk + 4]);
            acc[b] += wf[0] * a0.x + wf[1] * a0.y + wf[2] * a0.z + wf[3] * a0.w
                    + wf[4] * a1.x + wf[5] * a1.y + wf[6] * a1.z + wf[7] * a1.w;
        }
    }
}

__device__ __forceinline__ void stage_a(const float* __restrict__ A, int b0, int nb, int k0, int K, float (*As)[KC])
{
    for (int i = threadIdx.x; i < MAXB * KC; i += blockDim.x) {
        const int b = i / KC, kk = i % KC;
        As[b][kk] = (b < nb && k0 + kk < K) ? A[(long long)(b0 + b) * K + k0 + kk] : 0.0f;
    }
}

// out[b, n] = A[b] . W[n] (+ resid[b, n] when resid is not null), fp32 out
extern "C" __global__ void __launch_bounds__(256)
rowdot_f32(const float* __restrict__ A, const __nv_bfloat16* __restrict__ W, const float* __restrict__ resid,
           float* __restrict__ out, int B, int N, int K)
{
    __shared__ __align__(16) float As[MAXB][KC];
    const int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    const int b0 = blockIdx.y * MAXB;
    const int nb = min(MAXB, B - b0);
    float acc[MAXB];
#pragma unroll
    for (int b = 0; b < MAXB; ++b) acc[b] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KC) {
        stage_a(A, b0, nb, k0, K, As);
        __syncthreads();
        if (n < N) dot_chunk(W + (long long)n * K, k0, K, As, nb, acc);
        __syncthreads();
    }
#pragma unroll
    for (int b = 0; b < MAXB; ++b) {
        const float v = warp_sum(acc[b]);
        if ((threadIdx.x & 31) == 0 && n < N && b < nb) {
            const long long o = (long long)(b0 + b) * N + n;
            out[o] = resid ? resid[o] + v : v;
        }
    }
}

// act[b, n] = silu(A[b] . Wg[n]) * (A[b] . Wu[n])
extern "C" __global__ void __launch_bounds__(256)
rowdot_swiglu(const float* __restrict__ A, const __nv_bfloat16* __restrict__ Wg, const __nv_bfloat16* __restrict__ Wu,
              float* __restrict__ act, int B, int N, int K)
{
    __shared__ __align__(16) float As[MAXB][KC];
    const int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    const int b0 = blockIdx.y * MAXB;
    const int nb = min(MAXB, B - b0);
    float ag[MAXB], au[MAXB];
#pragma unroll
    for (int b = 0; b < MAXB; ++b) { ag[b] = 0.0f; au[b] = 0.0f; }
    for (int k0 = 0; k0 < K; k0 += KC) {
        stage_a(A, b0, nb, k0, K, As);
        __syncthreads();
        if (n < N) {
            dot_chunk(Wg + (long long)n * K, k0, K, As, nb, ag);
            dot_chunk(Wu + (long long)n * K, k0, K, As, nb, au);
        }
        __syncthreads();
    }
#pragma unroll
    for (int b = 0; b < MAXB; ++b) {
        const float g = warp_sum(ag[b]);
        const float u = warp_sum(au[b]);
        if ((threadIdx.x & 31) == 0 && n < N && b < nb)
            act[(long long)(b0 + b) * N + n] = g / (1.0f + expf(-g)) * u;
    }
}

// out[b, n] = bf16(resid[b, n] + A[b] . W[n])
extern "C" __global__ void __launch_bounds__(256)
rowdot_residual_bf16(const float* __restrict__ A, const __nv_bfloat16* __restrict__ W, const float* __restrict__ resid,
                     __nv_bfloat16* __restrict__ out, int B, int N, int K)
{
    __shared__ __align__(16) float As[MAXB][KC];
    const int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    const int b0 = blockIdx.y * MAXB;
    const int nb = min(MAXB, B - b0);
    float acc[MAXB];
#pragma unroll
    for (int b = 0; b < MAXB; ++b) acc[b] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += KC) {
        stage_a(A, b0, nb, k0, K, As);
        __syncthreads();
        if (n < N) dot_chunk(W + (long long)n * K, k0, K, As, nb, acc);
        __syncthreads();
    }
#pragma unroll
    for (int b = 0; b < MAXB; ++b) {
        const float v = warp_sum(acc[b]);
        if ((threadIdx.x & 31) == 0 && n < N && b < nb) {
            const long long o = (long long)(b0 + b) * N + n;
            out[o] = __float2bfloat16_rn(resid[o] + v);
        }
    }
}

// ---- RoPE (rotate-half) at one position, in place on fp32 q [B, H*D] and k [B, KVH*D]; k also to bf16 --------
extern "C" __global__ void rope_qk_at(float* __restrict__ q, float* __restrict__ k, __nv_bfloat16* __restrict__ k_new,
                                      int B, int H, int KVH, int D, int pos, float theta)
{
    const int half = D / 2;
    const long long total = (long long)B * (H + KVH) * half;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    const int i = (int)(t % half);
    const long long r = t / half;               // (b, head) with q heads first, then k heads
    const int head = (int)(r % (H + KVH));
    const int b = (int)(r / (H + KVH));
    const float inv_freq = powf(theta, -(float)(2 * i) / (float)D);
    const float angle = (float)pos * inv_freq;
    const float c = cosf(angle), s = sinf(angle);
    float* v = head < H ? q + ((long long)b * H + head) * D : k + ((long long)b * KVH + (head - H)) * D;
    const float x1 = v[i], x2 = v[i + half];
    const float y1 = x1 * c - x2 * s;
    const float y2 = x2 * c + x1 * s;
    v[i] = y1;
    v[i + half] = y2;
    if (head >= H) {
        __nv_bfloat16* kn = k_new + ((long long)b * KVH + (head - H)) * D;
        kn[i] = __float2bfloat16_rn(y1);
        kn[i + half] = __float2bfloat16_rn(y2);
    }
}

extern "C" __global__ void f32_to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

// ---- GQA decode attention: block (b, kv head) serves its G query heads over L cached keys + the new one ------
#define GMAX 8
extern "C" __global__ void __launch_bounds__(256)
attn_decode_gqa(const float* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                const __nv_bfloat16* __restrict__ v_cache, const float* __restrict__ k_cur, const float* __restrict__ v_cur,
                float* __restrict__ out, int H, int KVH, int L, int D, float scale)
{
    extern __shared__ float smem[];
    const int G = H / KVH;
    const int kvh = blockIdx.x, b = blockIdx.y;
    const int S = L + 1;                      // keys: the cache, then the new token
    float* qs = smem;                         // [G][D]
    float* p = smem + G * D;                  // [G][S]
    const long long kvbase = ((long long)b * KVH + kvh) * (long long)L * D;
    const float* kc = k_cur + ((long long)b * KVH + kvh) * D;
    const float* vc = v_cur + ((long long)b * KVH + kvh) * D;

    for (int i = threadIdx.x; i < G * D; i += blockDim.x)
        qs[i] = q[((long long)b * H + (long long)kvh * G) * D + i];
    __syncthreads();

    // scores
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        float acc[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) acc[g] = 0.0f;
        if (j < L) {
            const __nv_bfloat162* kr = reinterpret_cast<const __nv_bfloat162*>(k_cache + kvbase + (long long)j * D);
            for (int d2 = 0; d2 < D / 2; ++d2) {
                const float2 kv = __bfloat1622float2(kr[d2]);
#pragma unroll
                for (int g = 0; g < GMAX; ++g)
                    if (g < G) acc[g] += qs[g * D + 2 * d2] * kv.x + qs[g * D + 2 * d2 + 1] * kv.y;
            }
        } else {
            for (int d = 0; d < D; ++d) {
                const float kv = kc[d];
#pragma unroll
                for (int g = 0; g < GMAX; ++g)
                    if (g < G) acc[g] += qs[g * D + d] * kv;
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g)
            if (g < G) p[g * S + j] = acc[g] * scale;
    }
    __syncthreads();

    // softmax per query head: warp g handles head g (and g + 8, ...)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    for (int g = warp; g < G; g += nwarps) {
        float* pg = p + g * S;
        float m = NEG_INF;
        for (int j = lane; j < S; j += 32) m = fmaxf(m, pg[j]);
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL, m, off));
        float s = 0.0f;
        for (int j = lane; j < S; j += 32) { const float e = expf(pg[j] - m); pg[j] = e; s += e; }
        s = warp_sum(s);
        const float inv = 1.0f / s;
        for (int j = lane; j < S; j += 32) pg[j] *= inv;
    }
    __syncthreads();

    // out = p @ v
    for (int o = threadIdx.x; o < G * D; o += blockDim.x) {
        const int g = o / D, d = o % D;
        const float* pg = p + g * S;
        float acc = 0.0f;
        for (int j = 0; j < L; ++j) acc += pg[j] * __bfloat162float(v_cache[kvbase + (long long)j * D + d]);
        acc += pg[L] * vc[d];
        out[((long long)b * H + (long long)kvh * G + g) * D + d] = acc;
    }
}
"""

dec = load_cuda(DECODE_SRC, name="decode_layer_multikernel.cu")


class ModelNew(nn.Module):
    def __init__(self, num_heads, num_kv_heads, head_dim, ffn, eps, rope_theta, dtype):
        super().__init__()
        hidden, kv = num_heads * head_dim, num_kv_heads * head_dim
        self.num_heads, self.num_kv_heads, self.eps, self.rope_theta = num_heads, num_kv_heads, eps, rope_theta
        self.attn_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.mlp_norm = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.q_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)

    def _rowdot(self, a, w, resid, out, n_out, k):
        b = a.shape[0]
        dec.rowdot_f32(((n_out + 7) // 8, (b + 15) // 16), (256,), (a, w, resid, out, b, n_out, k))

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
        x = x.contiguous()
        k_cache = k_cache.contiguous()
        v_cache = v_cache.contiguous()
        b, hidden = x.shape
        kvh, cache_len, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
        heads = self.num_heads
        kv = kvh * head_dim
        ffn = self.gate.weight.shape[0]
        dev = x.device
        f32 = torch.float32

        xf = torch.empty((b, hidden), dtype=f32, device=dev)
        n1 = torch.empty((b, hidden), dtype=f32, device=dev)
        q = torch.empty((b, hidden), dtype=f32, device=dev)
        k = torch.empty((b, kv), dtype=f32, device=dev)
        v = torch.empty((b, kv), dtype=f32, device=dev)
        attn = torch.empty((b, hidden), dtype=f32, device=dev)
        h = torch.empty((b, hidden), dtype=f32, device=dev)
        n2 = torch.empty((b, hidden), dtype=f32, device=dev)
        act = torch.empty((b, ffn), dtype=f32, device=dev)
        out = torch.empty((b, hidden), dtype=x.dtype, device=dev)
        k_new = torch.empty((b, kvh, head_dim), dtype=x.dtype, device=dev)
        v_new = torch.empty((b, kvh, head_dim), dtype=x.dtype, device=dev)

        dec.rmsnorm_in_bf16((b,), (256,), (x, self.attn_norm, n1, xf, hidden, self.eps))
        self._rowdot(n1, self.q_proj.weight, 0, q, hidden, hidden)
        self._rowdot(n1, self.k_proj.weight, 0, k, kv, hidden)
        self._rowdot(n1, self.v_proj.weight, 0, v, kv, hidden)
        pairs = b * (heads + kvh) * (head_dim // 2)
        dec.rope_qk_at(((pairs + 255) // 256,), (256,),
                       (q, k, k_new, b, heads, kvh, head_dim, cache_len, self.rope_theta))
        dec.f32_to_bf16(((b * kv + 255) // 256,), (256,), (v, v_new, b * kv))
        group = heads // kvh
        smem = 4 * (group * head_dim + group * (cache_len + 1))
        dec.attn_decode_gqa((kvh, b), (256,),
                            (q, k_cache, v_cache, k, v, attn, heads, kvh, cache_len, head_dim,
                             1.0 / math.sqrt(head_dim)), shared_mem=smem)
        self._rowdot(attn, self.o_proj.weight, xf, h, hidden, hidden)
        dec.rmsnorm_in_f32((b,), (256,), (h, self.mlp_norm, n2, hidden, self.eps))
        dec.rowdot_swiglu(((ffn + 7) // 8, (b + 15) // 16), (256,), (n2, self.gate.weight, self.up.weight, act, b, ffn, hidden))
        dec.rowdot_residual_bf16(((hidden + 7) // 8, (b + 15) // 16), (256,), (act, self.down.weight, h, out, b, hidden, ffn))
        return out, k_new, v_new
