# expect: correct
# problem: fixtures/kernelbench/level2/12_Gemm_Multiply_LeakyReLU.py
# format: load_inline
# fused linear + scale + LeakyReLU in a kernel named like the problem (gemm_mul_leaky_relu_kernel: its own, not a library GEMM): 16x16 shared-memory tiles with dim3 2D blocks and grid, nn.Linear kept as self.gemm, float scalars (multiplier, negative_slope) passed as double, get_inputs repeated
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

fused_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

#define TILE 16

// out[m, n] = leaky_relu((sum_k x[m, k] * w[n, k] + b[n]) * multiplier)
__global__ void gemm_mul_leaky_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                        const float* __restrict__ b, float* __restrict__ out,
                                        int M, int N, int K, float multiplier, float negative_slope) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;   // m
    const int col = blockIdx.x * TILE + threadIdx.x;   // n
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int kx = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? x[row * K + kx] : 0.0f;
        // w tile loaded transposed: ws[k][n]
        const int wn = blockIdx.x * TILE + threadIdx.y;
        ws[threadIdx.x][threadIdx.y] = (wn < N && kx < K) ? w[wn * K + kx] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) {
        float v = (acc + b[col]) * multiplier;
        out[row * N + col] = v > 0.0f ? v : v * negative_slope;
    }
}

torch::Tensor linear_mul_leaky_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                    double multiplier, double negative_slope) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    const int M = x.size(0);
    const int K = x.size(1);
    const int N = weight.size(0);
    auto out = torch::empty({M, N}, torch::TensorOptions().dtype(x.dtype()).device(x.device()));

    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_mul_leaky_relu_kernel<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                             out.data_ptr<float>(), M, N, K, (float)multiplier, (float)negative_slope);
    return out;
}
"""

fused_cpp_source = (
    "torch::Tensor linear_mul_leaky_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, "
    "double multiplier, double negative_slope);"
)

fused_op = load_inline(
    name="linear_mul_leaky_relu",
    cpp_sources=fused_cpp_source,
    cuda_sources=fused_source,
    functions=["linear_mul_leaky_relu"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    """
    Optimized model: Linear, multiply and LeakyReLU fused into a single CUDA kernel.
    """
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope
        self.fused_op = fused_op

    def forward(self, x):
        return self.fused_op.linear_mul_leaky_relu(x, self.gemm.weight, self.gemm.bias,
                                                   self.multiplier, self.negative_slope)


batch_size = 32
in_features = 64
out_features = 48
multiplier = 2.0
negative_slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, multiplier, negative_slope]
