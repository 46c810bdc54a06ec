# expect: correct
# problem: layernorm_gelu
# format: load_inline
# KernelBench-v3 naming (class Model); fp16 via cuda_fp16.h (__half2float / __float2half_rn on at::Half data), LayerNorm over the strided channel axis with one thread per (batch, frame) column so loads coalesce across frames, per-thread Welford statistics, exact-erf GELU, dim3 grid (frame blocks, batch)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

ln_gelu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

// x, y: [batch, channels, frames]. Thread (b, f) normalizes the column x[b, :, f].
__global__ void channel_layernorm_gelu_kernel(const __half* __restrict__ x, const __half* __restrict__ gamma,
                                              const __half* __restrict__ beta, __half* __restrict__ y,
                                              int channels, int frames, float eps) {
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y;
    if (f >= frames) return;
    const size_t base = (size_t)b * channels * frames + f;

    // Welford: numerically stable running mean and sum of squared deviations
    float mean = 0.0f, m2 = 0.0f;
    for (int c = 0; c < channels; ++c) {
        const float v = __half2float(x[base + (size_t)c * frames]);
        const float delta = v - mean;
        mean += delta / (float)(c + 1);
        m2 += delta * (v - mean);
    }
    const float rstd = rsqrtf(m2 / (float)channels + eps);

    for (int c = 0; c < channels; ++c) {
        const size_t idx = base + (size_t)c * frames;
        const float v = (__half2float(x[idx]) - mean) * rstd * __half2float(gamma[c]) + __half2float(beta[c]);
        const float g = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
        y[idx] = __float2half_rn(g);
    }
}

torch::Tensor layernorm_gelu_channels(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.dim() == 3, "x must be [batch, channels, frames]");
    TORCH_CHECK(x.scalar_type() == at::kHalf, "x must be float16");
    auto xc = x.contiguous();
    const int batch = xc.size(0), channels = xc.size(1), frames = xc.size(2);
    auto y = torch::empty_like(xc);

    const int threads = 256;
    dim3 grid((frames + threads - 1) / threads, batch);
    channel_layernorm_gelu_kernel<<<grid, threads>>>(
        reinterpret_cast<const __half*>(xc.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(weight.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(bias.data_ptr<at::Half>()),
        reinterpret_cast<__half*>(y.data_ptr<at::Half>()), channels, frames, (float)eps);
    return y;
}
"""

ln_gelu_cpp = "torch::Tensor layernorm_gelu_channels(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

ln_gelu = load_inline(
    name="layernorm_gelu_channels",
    cpp_sources=ln_gelu_cpp,
    cuda_sources=ln_gelu_source,
    functions=["layernorm_gelu_channels"],
    verbose=False,
)


class Model(nn.Module):
    def __init__(self, channels: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ln_gelu.layernorm_gelu_channels(x, self.weight.contiguous(), self.bias.contiguous(), self.eps)


batch_size = 8
channels = 512
frames = 31999
eps = 1e-5
dtype = torch.float16


def get_inputs():
    return [torch.randn(batch_size, channels, frames, dtype=dtype)]


def get_init_inputs():
    return [channels, eps, dtype]
