# expect: correct
# problem: log_softmax
# format: load_inline
# two kernels in sequence on a dim3(chunks, rows) grid: per-chunk online (max, sum-exp) partials, then every chunk merges its row's partials and writes x - max - log(sum); few long rows spread over many blocks
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

log_softmax_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

#define THREADS 256

// (m, s): s is the sum of exp(x - m) over the elements seen so far.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

__device__ void block_merge(float& m, float& s) {
    __shared__ float sm[THREADS / 32], ss[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffff, m, off);
        const float s2 = __shfl_xor_sync(0xffffffff, s, off);
        merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < THREADS / 32 ? sm[lane] : -INFINITY;
        s = lane < THREADS / 32 ? ss[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffff, m, off);
            const float s2 = __shfl_xor_sync(0xffffffff, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    m = sm[0];
    s = ss[0];
}

// grid = (chunks, rows): block (c, r) reduces columns [c * chunk, (c + 1) * chunk) of row r.
__global__ void row_chunk_stats_kernel(const float* __restrict__ x, float* __restrict__ part_max,
                                       float* __restrict__ part_sum, int cols, int chunk) {
    const int row = blockIdx.y, c = blockIdx.x;
    const float* xr = x + (size_t)row * cols;
    const int begin = c * chunk;
    const int end = min(cols, begin + chunk);
    float m = -INFINITY, s = 0.0f;
    for (int i = begin + threadIdx.x; i < end; i += THREADS) merge(m, s, xr[i], 1.0f);
    block_merge(m, s);
    if (threadIdx.x == 0) {
        part_max[row * gridDim.x + c] = m;
        part_sum[row * gridDim.x + c] = s;
    }
}

__global__ void log_softmax_write_kernel(const float* __restrict__ x, const float* __restrict__ part_max,
                                         const float* __restrict__ part_sum, float* __restrict__ y,
                                         int cols, int chunk) {
    const int row = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
    // every block merges the row's few partials itself: no third launch needed
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < chunks; j += THREADS) merge(m, s, part_max[row * chunks + j], part_sum[row * chunks + j]);
    block_merge(m, s);
    const float shift = m + logf(s);

    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    const int begin = c * chunk;
    const int end = min(cols, begin + chunk);
    for (int i = begin + threadIdx.x; i < end; i += THREADS) yr[i] = xr[i] - shift;
}

torch::Tensor log_softmax_forward(torch::Tensor x, int64_t chunks) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "expected a 2D CUDA tensor");
    x = x.contiguous();
    const int rows = x.size(0), cols = x.size(1);
    const int chunk = (cols + chunks - 1) / chunks;
    auto part_max = torch::empty({rows, chunks}, x.options());
    auto part_sum = torch::empty({rows, chunks}, x.options());
    auto y = torch::empty_like(x);

    dim3 grid(chunks, rows);
    row_chunk_stats_kernel<<<grid, THREADS>>>(x.data_ptr<float>(), part_max.data_ptr<float>(),
                                              part_sum.data_ptr<float>(), cols, chunk);
    log_softmax_write_kernel<<<grid, THREADS>>>(x.data_ptr<float>(), part_max.data_ptr<float>(),
                                                part_sum.data_ptr<float>(), y.data_ptr<float>(), cols, chunk);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "log_softmax kernels: ", cudaGetErrorString(err));
    return y;
}
"""

log_softmax_cpp = "torch::Tensor log_softmax_forward(torch::Tensor x, int64_t chunks);"

log_softmax_ext = load_inline(
    name="log_softmax_split_rows",
    cpp_sources=log_softmax_cpp,
    cuda_sources=log_softmax_source,
    functions=["log_softmax_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = x.shape[-1]
        # about 4k columns per block, at most 64 blocks per row, never an empty chunk
        chunks = max(1, min(64, math.ceil(cols / 4096)))
        return log_softmax_ext.log_softmax_forward(x, chunks)


batch_size = 64
vocab = 128256


def get_inputs():
    return [torch.randn(batch_size, vocab)]


def get_init_inputs():
    return []
