# expect: compile_error host_code
# problem: softmax
# refused: a host variable of type Fn
# a function pointer to ATen's softmax, through a type alias (no at:: at the call)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

#define THREADS 256

// one block per row: max, then the sum of exponentials, then the normalized row
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float red[THREADS];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, xr[i]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.x; i < cols; i += THREADS) sum += expf(xr[i] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int i = threadIdx.x; i < cols; i += THREADS) yr[i] = expf(xr[i] - m) * inv;
}

using namespace at;
using Fn = Tensor (*)(const Tensor&, int64_t, std::optional<ScalarType>);

torch::Tensor softmax_forward(torch::Tensor x) {
    Fn fn = &softmax;
    return fn(x, 1, std::nullopt);
}
"""

CPP = r"""
torch::Tensor softmax_forward(torch::Tensor x);"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("inline_function_pointer", cpp_sources=CPP, cuda_sources=CUDA,
                               functions=["softmax_forward"])

    def forward(self, x):
        return self.ext.softmax_forward(x)
