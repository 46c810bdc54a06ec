# expect: rejected torch_compute
# problem: matmul_bias_relu
# load_inline C++ that calls ATen matmul
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x, torch::Tensor w) { return torch::matmul(x, w.t()); }
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.ext = load_inline("ext", cpp_sources=CPP, functions=["f"])

    def forward(self, x):
        return self.ext.f(x, self.linear.weight)