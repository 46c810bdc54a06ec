# expect: correct
# problem: add_rmsnorm
# format: load_inline
# fused residual add + RMSNorm returning two tensors as std::vector<torch::Tensor>; bf16 pairs (__nv_bfloat162), the fp32 sum kept unrounded for the statistics and rounded once for the residual output, eps as a float argument
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

add_rmsnorm_cuda = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <vector>

__global__ void add_rmsnorm_kernel(const __nv_bfloat162* __restrict__ x, const __nv_bfloat162* __restrict__ res,
                                   const __nv_bfloat162* __restrict__ w, __nv_bfloat162* __restrict__ normed,
                                   __nv_bfloat162* __restrict__ sum_out, int pairs, float eps) {
    extern __shared__ float red[];
    const size_t off = (size_t)blockIdx.x * pairs;

    // sweep 1: s = x + residual in fp32; write the rounded sum, accumulate s^2
    float ss = 0.0f;
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        const float2 a = __bfloat1622float2(x[off + i]);
        const float2 r = __bfloat1622float2(res[off + i]);
        const float s0 = a.x + r.x, s1 = a.y + r.y;
        sum_out[off + i] = __floats2bfloat162_rn(s0, s1);
        ss += s0 * s0 + s1 * s1;
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(red[0] / (float)(2 * pairs) + eps);

    // sweep 2: recompute the unrounded sum (same fp32 adds) and normalize
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        const float2 a = __bfloat1622float2(x[off + i]);
        const float2 r = __bfloat1622float2(res[off + i]);
        const float2 g = __bfloat1622float2(w[i]);
        normed[off + i] = __floats2bfloat162_rn((a.x + r.x) * inv_rms * g.x, (a.y + r.y) * inv_rms * g.y);
    }
}

std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda(), "all inputs must be CUDA tensors");
    TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual must have the same shape");
    x = x.contiguous();
    residual = residual.contiguous();
    weight = weight.contiguous();
    const int dim = x.size(-1);
    TORCH_CHECK(dim % 2 == 0, "hidden size must be even");
    const int rows = x.numel() / dim;
    auto normed = torch::empty_like(x);
    auto summed = torch::empty_like(x);

    const int threads = 512;  // power of two: the tree reduction halves it
    add_rmsnorm_kernel<<<rows, threads, threads * sizeof(float)>>>(
        reinterpret_cast<const __nv_bfloat162*>(x.data_ptr<at::BFloat16>()),
        reinterpret_cast<const __nv_bfloat162*>(residual.data_ptr<at::BFloat16>()),
        reinterpret_cast<const __nv_bfloat162*>(weight.data_ptr<at::BFloat16>()),
        reinterpret_cast<__nv_bfloat162*>(normed.data_ptr<at::BFloat16>()),
        reinterpret_cast<__nv_bfloat162*>(summed.data_ptr<at::BFloat16>()), dim / 2, (float)eps);
    TORCH_CHECK(cudaGetLastError() == cudaSuccess, "add_rmsnorm_kernel launch failed");
    return {normed, summed};
}
"""

add_rmsnorm_cpp = (
    "#include <vector>\n"
    "std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps);"
)

add_rmsnorm_ext = load_inline(
    name="add_rmsnorm_two_outputs",
    cpp_sources=add_rmsnorm_cpp,
    cuda_sources=add_rmsnorm_cuda,
    functions=["add_rmsnorm"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))
        self.ext = add_rmsnorm_ext

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        normed, summed = self.ext.add_rmsnorm(x, residual, self.weight, self.eps)
        return normed, summed
