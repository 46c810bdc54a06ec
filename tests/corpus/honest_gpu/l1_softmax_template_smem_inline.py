# expect: correct
# problem: softmax
# format: load_inline
# templated kernel (template <int BLOCK>, launched as k<256><<<rows, 256, smem>>>), dynamic shared memory tree reductions, max-subtracted three-sweep softmax, TORCH_CHECK + cudaGetLastError
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

softmax_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// One block per row. Three sweeps over the row: the max, the sum of exp(x - max), then the
// normalized output. Partial results are reduced through dynamic shared memory.
template <int BLOCK>
__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float sdata[];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;

    float m = -INFINITY;
    for (int c = tid; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    sdata[tid] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] = fmaxf(sdata[tid], sdata[tid + s]);
        __syncthreads();
    }
    const float row_max = sdata[0];
    __syncthreads();  // everyone has read sdata[0] before it is reused

    float sum = 0.0f;
    for (int c = tid; c < cols; c += BLOCK) sum += expf(xr[c] - row_max);
    sdata[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    const float inv_sum = 1.0f / sdata[0];

    for (int c = tid; c < cols; c += BLOCK) yr[c] = expf(xr[c] - row_max) * inv_sum;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.dim() == 2, "softmax_forward: expected a 2D tensor, got ", x.dim(), "D");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int rows = x.size(0);
    const int cols = x.size(1);

    constexpr int BLOCK = 256;
    const size_t smem = BLOCK * sizeof(float);
    softmax_rows_kernel<BLOCK><<<rows, BLOCK, smem>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);

    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

softmax_cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="softmax_template_smem",
    cpp_sources=softmax_cpp_source,
    cuda_sources=softmax_cuda_source,
    functions=["softmax_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Softmax over the last dimension with a custom CUDA kernel."""

    def __init__(self):
        super(ModelNew, self).__init__()
        self.softmax_ext = softmax_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax_ext.softmax_forward(x)


batch_size = 256
dim = 32000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
