# expect: compile_error cuda_compile
# problem: softmax
# CUDA C that does not compile: the message carries NVRTC line numbers
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
extern "C" __global__ void k(float* y, int n) {
    y[threadIdx.x] = undefined_variable;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mod = load_cuda(SRC)

    def forward(self, x):
        return x