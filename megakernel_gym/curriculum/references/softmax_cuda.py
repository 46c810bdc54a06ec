"""Reference candidate for problems/softmax.py in CUDA C, compiled by the project's NVRTC loader.

One thread block per row. Sweep 1 loads the row into registers (up to 8 float4 per thread) and
keeps a per-thread online (max, sum) pair, merged across each warp with shuffles and across
warps through shared memory. Sweep 2 writes exp(x - max) / sum from the registers; the part of
a row too long for them is re-read (hot in L2). Loads and stores move 16 bytes each; a row
whose start is not 16-byte aligned peels up to three scalars first, and the last n % 4 columns
are scalar too. Rows whose input and output misalign differently fall back to scalars.
"""
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SOURCE = r"""
#define MAX_WARPS 32
#define NEG_INF __int_as_float(0xff800000)

// Merge running softmax state (m, s) with (m2, s2): s is the sum of exp(x - m).
__device__ __forceinline__ void merge_state(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == NEG_INF) return;                 // both empty: nothing to rescale
    s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
    m = mn;
}


// Up to CACHE float4 per thread stay in registers between the two sweeps (8 x 1024 threads
// covers a 32k row); longer rows re-read the rest from global memory (L2) in sweep 2.
#define CACHE 8

__device__ __forceinline__ float4 exp_scaled(float4 v, float row_max, float inv_sum) {
    v.x = __expf(v.x - row_max) * inv_sum;
    v.y = __expf(v.y - row_max) * inv_sum;
    v.z = __expf(v.z - row_max) * inv_sum;
    v.w = __expf(v.w - row_max) * inv_sum;
    return v;
}

__device__ __forceinline__ void merge_vec(float& m, float& s, float4 v) {
    float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (vm == NEG_INF) return;                 // masked-out logits (-inf) add nothing
    merge_state(m, s, vm, __expf(v.x - vm) + __expf(v.y - vm) + __expf(v.z - vm) + __expf(v.w - vm));
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_rows_f32(const float* __restrict__ x, float* __restrict__ y, int n_cols)
{
    const long long row = blockIdx.x;
    const float* xr = x + row * (long long)n_cols;
    float* yr = y + row * (long long)n_cols;
    const int tid = threadIdx.x, nthreads = blockDim.x;

    // Split the row into [0, head) scalar, [head, vec_end) float4, [vec_end, n) scalar.
    const unsigned long long ax = (unsigned long long)xr, ay = (unsigned long long)yr;
    int head = n_cols, vec_end = n_cols;
    if (((ax ^ ay) & 15ull) == 0 && (ax & 3ull) == 0) {
        head = (int)(((16ull - (ax & 15ull)) & 15ull) >> 2);
        if (head > n_cols) head = n_cols;
        vec_end = head + ((n_cols - head) & ~3);
    }
    const float4* xv = reinterpret_cast<const float4*>(xr + head);
    float4* yv = reinterpret_cast<float4*>(yr + head);
    const int n_vec = (vec_end - head) >> 2;

    // Sweep 1: issue all cached loads first (memory-level parallelism), then fold them into an
    // online (max, sum) pair.
    float4 cache[CACHE];
#pragma unroll
    for (int j = 0; j < CACHE; ++j) {
        const int i = tid + j * nthreads;
        if (i < n_vec) cache[j] = xv[i];
    }
    float m = NEG_INF, s = 0.0f;
    for (int i = tid; i < head; i += nthreads) merge_state(m, s, xr[i], 1.0f);
#pragma unroll
    for (int j = 0; j < CACHE; ++j)
        if (tid + j * nthreads < n_vec) merge_vec(m, s, cache[j]);
    for (int i = tid + CACHE * nthreads; i < n_vec; i += nthreads) merge_vec(m, s, xv[i]);
    for (int i = vec_end + tid; i < n_cols; i += nthreads) merge_state(m, s, xr[i], 1.0f);

    // Reduce (m, s) over the warp, then over the block.
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_state(m, s, m2, s2);
    }
    __shared__ float sm_m[MAX_WARPS], sm_s[MAX_WARPS];
    const int warp = tid >> 5, lane = tid & 31, nwarps = (nthreads + 31) >> 5;
    if (lane == 0) { sm_m[warp] = m; sm_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sm_m[lane] : NEG_INF;
        s = lane < nwarps ? sm_s[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge_state(m, s, m2, s2);
        }
        if (lane == 0) { sm_m[0] = m; sm_s[0] = s; }
    }
    __syncthreads();
    const float row_max = sm_m[0];
    const float inv_sum = 1.0f / sm_s[0];

    // Sweep 2: write the probabilities.
    for (int i = tid; i < head; i += nthreads) yr[i] = __expf(xr[i] - row_max) * inv_sum;
#pragma unroll
    for (int j = 0; j < CACHE; ++j) {
        const int i = tid + j * nthreads;
        if (i < n_vec) yv[i] = exp_scaled(cache[j], row_max, inv_sum);
    }
    for (int i = tid + CACHE * nthreads; i < n_vec; i += nthreads) yv[i] = exp_scaled(xv[i], row_max, inv_sum);
    for (int i = vec_end + tid; i < n_cols; i += nthreads) yr[i] = __expf(xr[i] - row_max) * inv_sum;
}
"""

_mod = load_cuda(SOURCE, name="softmax_rows.cu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        xc = x.contiguous()
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n_rows = xc.numel() // n_cols
        # enough threads for every float4 of the row to sit in the 8-deep register cache, but at
        # most 512: at 64 registers a thread two blocks share an SM, so 256 rows of 32000 run in
        # one wave (26 us on an H200, against 28 us at 1024 threads and 33 us at 256)
        threads = min(512, max(32, ((n_cols + 1023) // 1024) * 32))
        _mod.softmax_rows_f32((n_rows,), (threads,), (xc, y, n_cols))
        return y
