# expect: correct
# problem: layernorm
# format: load_inline
# CHECK_CUDA / CHECK_CONTIGUOUS / CHECK_INPUT macros, float eps argument, x.size(-1) and x.numel(), two-pass (mean, then centred variance) block reduction with warp shuffles, weights read from the kept nn.LayerNorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)

#define WARP_SIZE 32

__device__ __forceinline__ float warp_reduce_sum(float v) {
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

// Sum over the block; every thread gets the result.
__device__ float block_reduce_sum(float v, float* shared) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int wid = threadIdx.x / WARP_SIZE;
    v = warp_reduce_sum(v);
    if (lane == 0) shared[wid] = v;
    __syncthreads();
    const int nwarps = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    v = (threadIdx.x < nwarps) ? shared[lane] : 0.0f;
    if (wid == 0) v = warp_reduce_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();  // shared may be reused by the next reduction
    return v;
}

__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y,
                                 int hidden, float eps) {
    __shared__ float shared[WARP_SIZE];
    const float* xr = x + (size_t)blockIdx.x * hidden;
    float* yr = y + (size_t)blockIdx.x * hidden;

    float s = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) s += xr[i];
    const float mean = block_reduce_sum(s, shared) / hidden;

    // centred second pass: no cancellation when the mean is large compared to the spread
    float sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float d = xr[i] - mean;
        sq += d * d;
    }
    const float var = block_reduce_sum(sq, shared) / hidden;
    const float rstd = rsqrtf(var + eps);

    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    CHECK_INPUT(x);
    CHECK_INPUT(weight);
    CHECK_INPUT(bias);
    const int hidden = x.size(-1);
    const int rows = x.numel() / hidden;
    auto y = torch::empty_like(x);

    const int threads = 512;
    layernorm_kernel<<<rows, threads>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                        y.data_ptr<float>(), hidden, static_cast<float>(eps));
    return y;
}
"""

layernorm_cpp = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

layernorm_ext = load_inline(
    name="layernorm_checkinput",
    cpp_sources=layernorm_cpp,
    cuda_sources=layernorm_source,
    functions=["layernorm_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        # same module as the reference, so the judge can load its weight and bias
        self.ln = nn.LayerNorm(dim, eps=eps, dtype=dtype)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_forward(x.contiguous(), self.ln.weight, self.ln.bias, self.eps)
