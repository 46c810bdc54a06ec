# expect: correct
# problem: fixtures/kernelbench/level1/19_ReLU.py
# format: load_inline
# the plainest KernelBench answer: one elementwise kernel on a 1D grid, verbose=True, unused F import, get_inputs repeated
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Define the custom CUDA kernel for ReLU
relu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = x[idx];
        out[idx] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int size = x.numel();

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

# Compile the inline CUDA code for ReLU
relu = load_inline(
    name="relu",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_source,
    functions=["relu_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    """
    Simple model that performs a ReLU activation with a custom CUDA kernel.
    """
    def __init__(self):
        super(ModelNew, self).__init__()
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu.relu_cuda(x.contiguous())


batch_size = 16
dim = 256


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed
