"""Reference candidate for problems/rmsnorm.py in CUDA C, compiled by the project's NVRTC loader.

One thread block per row, fp32 math for either storage type (bf16 on the GPU problem, fp32 for
the small shapes). Sweep 1 loads the row and the weight into registers with 16-byte loads (8
bf16 or 4 fp32 each), sums squares and reduces with warp shuffles plus one shared-memory step.
Sweep 2 writes x * inv_rms * w from the registers with 16-byte stores; only rows longer than
the register cache re-read the rest. Rows whose start is not 16-byte
aligned peel scalars first; the tail past the last full vector is scalar; if x, y and the weight
are misaligned relative to each other the whole row takes the scalar path.

bf16 is handled as raw 16-bit patterns (no cuda_bf16.h needed): widening is a shift, and
narrowing rounds to nearest-even exactly like torch's .to(torch.bfloat16).
"""
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SOURCE = r"""
#define MAX_WARPS 32

__device__ __forceinline__ float bf16_bits_to_float(unsigned int h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ unsigned int float_to_bf16_bits(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;   // keep NaN a NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                           // round to nearest even
    return u >> 16;
}

// Storage traits: VEC elements per 16-byte vector.
struct F32 {
    typedef float T;
    static const int VEC = 4;
    static __device__ __forceinline__ float load(const T* p, int i) { return p[i]; }
    static __device__ __forceinline__ void store(T* p, int i, float v) { p[i] = v; }
    static __device__ __forceinline__ void unpack(const uint4& r, float* v) {
        v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y);
        v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
    }
    static __device__ __forceinline__ uint4 pack(const float* v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]),
                          __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
};

struct BF16 {
    typedef unsigned short T;
    static const int VEC = 8;
    static __device__ __forceinline__ float load(const T* p, int i) { return bf16_bits_to_float(p[i]); }
    static __device__ __forceinline__ void store(T* p, int i, float v) { p[i] = (T)float_to_bf16_bits(v); }
    // little-endian: the low half of each 32-bit word is the earlier element
    static __device__ __forceinline__ void unpack2(unsigned int r, float* v) {
        v[0] = __uint_as_float(r << 16);
        v[1] = __uint_as_float(r & 0xffff0000u);
    }
    static __device__ __forceinline__ unsigned int pack2(const float* v) {
        return float_to_bf16_bits(v[0]) | (float_to_bf16_bits(v[1]) << 16);
    }
    static __device__ __forceinline__ void unpack(const uint4& r, float* v) {
        unpack2(r.x, v); unpack2(r.y, v + 2); unpack2(r.z, v + 4); unpack2(r.w, v + 6);
    }
    static __device__ __forceinline__ uint4 pack(const float* v) {
        return make_uint4(pack2(v), pack2(v + 2), pack2(v + 4), pack2(v + 6));
    }
};

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[MAX_WARPS];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? partial[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) partial[0] = v;
    }
    __syncthreads();
    return partial[0];
}

// Up to CACHE 16-byte vectors of x and of the weight per thread stay in registers between the
// two sweeps (4 x 8 bf16 x 1024 threads covers a 32k row); the rest of a longer row is re-read.
#define CACHE 4

template <typename S>
__device__ __forceinline__ void rmsnorm_row(const typename S::T* __restrict__ x,
                                            const typename S::T* __restrict__ w,
                                            typename S::T* __restrict__ y, int n, float eps)
{
    typedef typename S::T T;
    const long long row = blockIdx.x;
    const T* xr = x + row * (long long)n;
    T* yr = y + row * (long long)n;
    const int tid = threadIdx.x, nthreads = blockDim.x;
    const unsigned long long esz = sizeof(T);

    // [0, head) scalar, [head, vec_end) 16-byte vectors, [vec_end, n) scalar
    const unsigned long long ax = (unsigned long long)xr, ay = (unsigned long long)yr,
                             aw = (unsigned long long)w;
    int head = n, vec_end = n;
    if ((((ax ^ ay) | (ax ^ aw)) & 15ull) == 0 && (ax % esz) == 0) {
        head = (int)(((16ull - (ax & 15ull)) & 15ull) / esz);
        if (head > n) head = n;
        vec_end = head + ((n - head) / S::VEC) * S::VEC;
    }
    const int n_vec = (vec_end - head) / S::VEC;
    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    const uint4* wv = reinterpret_cast<const uint4*>(w + head);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);

    // Issue every cached load (x and weight) before any arithmetic.
    uint4 xc[CACHE], wc[CACHE];
#pragma unroll
    for (int j = 0; j < CACHE; ++j) {
        const int i = tid + j * nthreads;
        if (i < n_vec) { xc[j] = xv[i]; wc[j] = wv[i]; }
    }

    float ss = 0.0f;
    for (int i = tid; i < head; i += nthreads) { float v = S::load(xr, i); ss += v * v; }
#pragma unroll
    for (int j = 0; j < CACHE; ++j) {
        if (tid + j * nthreads < n_vec) {
            float v[S::VEC];
            S::unpack(xc[j], v);
#pragma unroll
            for (int e = 0; e < S::VEC; ++e) ss += v[e] * v[e];
        }
    }
    for (int i = tid + CACHE * nthreads; i < n_vec; i += nthreads) {
        float v[S::VEC];
        S::unpack(xv[i], v);
#pragma unroll
        for (int e = 0; e < S::VEC; ++e) ss += v[e] * v[e];
    }
    for (int i = vec_end + tid; i < n; i += nthreads) { float v = S::load(xr, i); ss += v * v; }

    const float inv_rms = rsqrtf(block_sum(ss) / (float)n + eps);

    for (int i = tid; i < head; i += nthreads) S::store(yr, i, S::load(xr, i) * inv_rms * S::load(w, i));
#pragma unroll
    for (int j = 0; j < CACHE; ++j) {
        const int i = tid + j * nthreads;
        if (i < n_vec) {
            float v[S::VEC], g[S::VEC];
            S::unpack(xc[j], v);
            S::unpack(wc[j], g);
#pragma unroll
            for (int e = 0; e < S::VEC; ++e) v[e] = v[e] * inv_rms * g[e];
            yv[i] = S::pack(v);
        }
    }
    for (int i = tid + CACHE * nthreads; i < n_vec; i += nthreads) {
        float v[S::VEC], g[S::VEC];
        S::unpack(xv[i], v);
        S::unpack(wv[i], g);
#pragma unroll
        for (int e = 0; e < S::VEC; ++e) v[e] = v[e] * inv_rms * g[e];
        yv[i] = S::pack(v);
    }
    for (int i = vec_end + tid; i < n; i += nthreads) S::store(yr, i, S::load(xr, i) * inv_rms * S::load(w, i));
}

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_rows_bf16(const unsigned short* __restrict__ x, const unsigned short* __restrict__ w,
                  unsigned short* __restrict__ y, int n_cols, float eps)
{
    rmsnorm_row<BF16>(x, w, y, n_cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_rows_f32(const float* __restrict__ x, const float* __restrict__ w,
                 float* __restrict__ y, int n_cols, float eps)
{
    rmsnorm_row<F32>(x, w, y, n_cols, eps);
}
"""

_mod = load_cuda(SOURCE, name="rmsnorm_rows.cu")


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        # filled from the reference's state_dict
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        xc = x.contiguous()
        w = self.weight.contiguous()
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n_rows = xc.numel() // n_cols
        # fill the 4-deep register cache: 4096 bf16 -> 128 threads of four 16-byte vectors
        # (21.5 us on an H200, against 27 us at 256 threads and 41 us at 512)
        per_thread = 32 if x.dtype == torch.bfloat16 else 16
        threads = min(1024, max(32, ((n_cols + 32 * per_thread - 1) // (32 * per_thread)) * 32))
        kernel = _mod.rmsnorm_rows_bf16 if x.dtype == torch.bfloat16 else _mod.rmsnorm_rows_f32
        kernel((n_rows,), (threads,), (xc, w, y, n_cols, self.eps))
        return y
