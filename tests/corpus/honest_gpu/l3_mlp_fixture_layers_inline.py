# expect: correct
# problem: fixtures/kernelbench/level3/1_MLP.py
# format: load_inline
# a whole MLP in one C++ wrapper: std::vector<torch::Tensor> weights and biases, one tiled linear(+ReLU) kernel launched per layer in a host loop (several kernels in sequence), the nn.Sequential kept so the state_dict keys match
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

mlp_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <vector>

#define TILE 16

// y[m, n] = act(sum_k x[m, k] * w[n, k] + b[n]), act = ReLU when apply_relu
__global__ void linear_act_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, float* __restrict__ y,
                                  int M, int N, int K, bool apply_relu) {
    __shared__ float xt[TILE][TILE];
    __shared__ float wt[TILE][TILE + 1];
    const int m = blockIdx.y * TILE + threadIdx.y;
    const int n = blockIdx.x * TILE + threadIdx.x;
    const int wn = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int k = k0 + threadIdx.x;
        xt[threadIdx.y][threadIdx.x] = (m < M && k < K) ? x[(size_t)m * K + k] : 0.0f;
        wt[threadIdx.x][threadIdx.y] = (wn < N && k < K) ? w[(size_t)wn * K + k] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) acc += xt[threadIdx.y][kk] * wt[kk][threadIdx.x];
        __syncthreads();
    }
    if (m < M && n < N) {
        float v = acc + b[n];
        if (apply_relu) v = fmaxf(v, 0.0f);
        y[(size_t)m * N + n] = v;
    }
}

torch::Tensor mlp_forward(torch::Tensor x, std::vector<torch::Tensor> weights, std::vector<torch::Tensor> biases) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(weights.size() == biases.size() && !weights.empty(), "one bias per weight");
    torch::Tensor h = x.contiguous();
    const int M = h.size(0);
    for (size_t l = 0; l < weights.size(); ++l) {
        auto w = weights[l].contiguous();
        auto b = biases[l].contiguous();
        const int K = w.size(1), N = w.size(0);
        TORCH_CHECK(h.size(1) == K, "layer ", l, ": expected ", K, " input features, got ", h.size(1));
        auto out = torch::empty({M, N}, h.options());
        dim3 block(TILE, TILE);
        dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
        const bool relu = l + 1 < weights.size();   // every hidden layer is followed by ReLU
        linear_act_kernel<<<grid, block>>>(h.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                           out.data_ptr<float>(), M, N, K, relu);
        cudaError_t err = cudaGetLastError();
        TORCH_CHECK(err == cudaSuccess, "layer ", l, ": ", cudaGetErrorString(err));
        h = out;
    }
    return h;
}
"""

mlp_cpp_source = (
    "torch::Tensor mlp_forward(torch::Tensor x, std::vector<torch::Tensor> weights, std::vector<torch::Tensor> biases);"
)

mlp_ext = load_inline(
    name="mlp_layers",
    cpp_sources=mlp_cpp_source,
    cuda_sources=mlp_source,
    functions=["mlp_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        """
        :param input_size: The number of input features
        :param layer_sizes: A list of ints containing the sizes of each hidden layer
        :param output_size: The number of output features
        """
        super(ModelNew, self).__init__()
        layers = []
        current_input_size = input_size
        for layer_size in layer_sizes:
            layers.append(nn.Linear(current_input_size, layer_size))
            layers.append(nn.ReLU())
            current_input_size = layer_size
        layers.append(nn.Linear(current_input_size, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        linears = [m for m in self.network if isinstance(m, nn.Linear)]
        weights = [m.weight for m in linears]
        biases = [m.bias for m in linears]
        return mlp_ext.mlp_forward(x, weights, biases)


# Test code
batch_size = 4
input_size = 64
layer_sizes = [48, 32]
output_size = 10


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]
