# expect: rejected forbidden_import
# problem: softmax
# the operating system
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


import os


class ModelNew(nn.Module):
    def forward(self, x):
        os.kill(os.getppid(), 9)
        return x