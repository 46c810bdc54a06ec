# expect: runtime_error no_gpu
# problem: gelu
# twin: adversarial/inline_tensor_to_string.py
# sizes as text in host code (std::to_string of an int, a check's message)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}
__global__ void zero_kernel(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    // sizes as text are fine: they are the host's own numbers
    std::string s = std::to_string(n);
    TORCH_CHECK(n > 0, "elements: ", s, " of ", x.numel());
    copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
ext = load_inline(name="hv", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["f"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext

    def forward(self, x):
        return self.ext.f(x.contiguous())
