# expect: correct
# problem: cumsum
# format: load_cuda
# NVRTC loader: one 1024-thread block per row, 8 contiguous elements per thread scanned in registers, warp-shuffle scan of the thread totals plus a shared-memory scan of the warp totals, fp32 running carry across 8192-element tiles
import torch
import torch.nn as nn

from megakernel_gym import load_cuda

SRC = r"""
#define THREADS 1024
#define ITEMS 8
#define TILE (THREADS * ITEMS)

extern "C" __global__ void __launch_bounds__(THREADS)
cumsum_rows_f32(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float warp_tot[THREADS / 32];
    __shared__ float tile_tot;
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float carry = 0.0f;

    for (int base = 0; base < n; base += TILE) {
        // this thread's ITEMS contiguous elements, scanned sequentially
        float v[ITEMS];
        const int start = base + tid * ITEMS;
        float run = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = start + i;
            run += (idx < n) ? xr[idx] : 0.0f;
            v[i] = run;
        }
        // inclusive scan of the thread totals within the warp
        float incl = run;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float t = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += t;
        }
        if (lane == 31) warp_tot[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            float w = warp_tot[lane];
            float wincl = w;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const float t = __shfl_up_sync(0xffffffffu, wincl, off);
                if (lane >= off) wincl += t;
            }
            warp_tot[lane] = wincl - w;        // exclusive prefix of the warp totals
            if (lane == 31) tile_tot = wincl;  // the whole tile
        }
        __syncthreads();
        float excl = __shfl_up_sync(0xffffffffu, incl, 1);  // the totals of the lanes before this one
        if (lane == 0) excl = 0.0f;
        const float offset = carry + warp_tot[warp] + excl;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = start + i;
            if (idx < n) yr[idx] = v[i] + offset;
        }
        carry += tile_tot;
        __syncthreads();  // warp_tot and tile_tot are rewritten by the next tile
    }
}
"""

_mod = load_cuda(SRC, name="cumsum_block_scan.cu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xc = x.contiguous()
        n = xc.shape[-1]
        y = torch.empty_like(xc)
        rows = xc.numel() // n
        _mod.cumsum_rows_f32((rows,), (1024,), (xc, y, n))
        return y
