# expect: correct
# problem: sum_reduce
# format: load_inline
# reduction over the middle (strided) axis with 2D thread blocks: dim3 block(32, 8) with threadIdx.x on the contiguous hidden axis, threadIdx.y splitting the sequence, dim3 grid over (hidden tiles, batch), partials combined in shared memory; x.size(0..2)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

sum_dim1_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

#define TILE_X 32
#define TILE_Y 8

__global__ void sum_dim1_kernel(const float* __restrict__ x, float* __restrict__ out, int seq_len, int hidden) {
    __shared__ float partial[TILE_Y][TILE_X + 1];
    const int b = blockIdx.y;
    const int h = blockIdx.x * TILE_X + threadIdx.x;
    float acc = 0.0f;
    if (h < hidden) {
        const float* base = x + (size_t)b * seq_len * hidden + h;
        for (int s = threadIdx.y; s < seq_len; s += TILE_Y) acc += base[(size_t)s * hidden];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && h < hidden) {
        float total = 0.0f;
        #pragma unroll
        for (int i = 0; i < TILE_Y; ++i) total += partial[i][threadIdx.x];
        out[(size_t)b * hidden + h] = total;
    }
}

torch::Tensor sum_dim1_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.dim() == 3, "x must be [batch, seq, hidden]");
    x = x.contiguous();
    const int batch = x.size(0);
    const int seq_len = x.size(1);
    const int hidden = x.size(2);
    auto out = torch::empty({batch, hidden}, x.options());

    dim3 block(TILE_X, TILE_Y);
    dim3 grid((hidden + TILE_X - 1) / TILE_X, batch);
    sum_dim1_kernel<<<grid, block>>>(x.data_ptr<float>(), out.data_ptr<float>(), seq_len, hidden);
    return out;
}
"""

sum_dim1_cpp_source = "torch::Tensor sum_dim1_cuda(torch::Tensor x);"

sum_dim1 = load_inline(
    name="sum_dim1",
    cpp_sources=sum_dim1_cpp_source,
    cuda_sources=sum_dim1_source,
    functions=["sum_dim1_cuda"],
    verbose=True,
)


class ModelNew(nn.Module):
    """
    Sums over dim=1 with a custom CUDA kernel.
    """
    def __init__(self):
        super(ModelNew, self).__init__()
        self.sum_dim1 = sum_dim1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sum_dim1.sum_dim1_cuda(x)


batch_size = 8
seq_len = 2048
hidden = 1024


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return []
