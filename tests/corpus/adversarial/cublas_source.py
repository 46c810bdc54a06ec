# expect: rejected forbidden_library
# problem: matmul_bias_relu
# cuBLAS inside the CUDA source
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


from megakernel_gym import load_cuda

SRC = r"""
#include <cublas_v2.h>
extern "C" __global__ void k(float* y) { y[0] = 0.f; }
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.mod = load_cuda(SRC)

    def forward(self, x):
        return x