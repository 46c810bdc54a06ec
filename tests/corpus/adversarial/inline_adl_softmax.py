# expect: compile_error host_code
# problem: softmax
# refused: c10::impl::ExcludeDispatchKeyGuard
# issue 38 family 5: host C++ excludes the Python dispatch keys and calls ATen's softmax unqualified (found by
# argument-dependent lookup, so no at:: for a regex to see); torch's real build ran it
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
"""

CPP = r"""
#include <torch/extension.h>
torch::Tensor softmax_forward(torch::Tensor x) {
    c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKeySet(c10::DispatchKey::Python));
    return softmax(x, 1);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("inline_adl_softmax", cpp_sources=CPP, cuda_sources=CUDA,
                               functions=["softmax_forward"])

    def forward(self, x):
        return self.ext.softmax_forward(x)
