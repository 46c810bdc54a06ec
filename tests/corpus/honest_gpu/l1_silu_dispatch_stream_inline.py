# expect: correct
# problem: silu
# format: load_inline
# KernelBench-v3 naming (class Model, no ModelNew); AT_DISPATCH_FLOATING_TYPES over a templated kernel, launch on at::cuda::getCurrentCUDAStream(), std::min grid cap with a grid-stride loop
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

silu_cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

template <typename scalar_t>
__global__ void silu_kernel(const scalar_t* __restrict__ input, scalar_t* __restrict__ output, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (; idx < size; idx += stride) {
        const scalar_t v = input[idx];
        output[idx] = v / (scalar_t(1) + exp(-v));
    }
}

torch::Tensor silu_forward_cuda(torch::Tensor input) {
    TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
    auto x = input.contiguous();
    auto output = torch::empty_like(x);
    const int64_t size = x.numel();
    if (size == 0) return output;

    const int threads = 512;
    const int blocks = (int)std::min<int64_t>((size + threads - 1) / threads, 65535);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "silu_forward_cuda", ([&] {
        silu_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            x.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), size);
    }));

    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "silu_kernel launch failed: ", cudaGetErrorString(err));
    return output;
}
"""

silu_cpp_source = "torch::Tensor silu_forward_cuda(torch::Tensor input);"

silu_ext = load_inline(
    name="silu_dispatch",
    cpp_sources=silu_cpp_source,
    cuda_sources=silu_cuda_source,
    functions=["silu_forward_cuda"],
    verbose=False,
    extra_cuda_cflags=["-O3"],
)


class Model(nn.Module):
    """SiLU (x * sigmoid(x)) computed by a custom CUDA kernel."""

    def __init__(self):
        super(Model, self).__init__()
        self.silu_ext = silu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.silu_ext.silu_forward_cuda(x)


batch_size = 1024
dim = 8192


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
