# expect: runtime_error no_gpu
# expect-gpu: compile_error host_code
# problem: gelu
# refused: a tensor as text
# red team 11: host code that reads a tensor's values as text (std::to_string(x), a TORCH_CHECK message holding x) and branches on them; on the cpu backend no host code runs (no_gpu), in the interpreter it is refused when the call reaches it
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
    // the host reads x's values: the text of the tensor
    std::string s = std::to_string(x);
    if (s == std::to_string(out)) {
        zero_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n);
    } else {
        copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    }
    TORCH_CHECK(n > 0, "values: ", x);
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
