# expect: runtime_error no_gpu
# problem: softmax
# twin: adversarial/inline_tensor_to_string.py
# sizes as text in host code (std::to_string of an int, a check's message): the host's own numbers
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

torch::Tensor softmax_forward(torch::Tensor x) {
    const int kThreads = THREADS;
    std::string rows = std::to_string(x.size(0));
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous fp32 CUDA, rows ",
                rows, " of ", x.numel(), " elements");
    auto y = torch::empty_like(x);
    softmax_kernel<<<(int)x.size(0), kThreads>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
    return y;
}
"""

CPP = r"""
torch::Tensor softmax_forward(torch::Tensor x);"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("inline_sizes_as_text", cpp_sources=CPP, cuda_sources=CUDA,
                               functions=["softmax_forward"])

    def forward(self, x):
        return self.ext.softmax_forward(x)
