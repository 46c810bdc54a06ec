# expect: compile_error no_modelnew
# problem: softmax
# neither a ModelNew class nor a Model class of its own (a misnamed class)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class MyModel(nn.Module):
    def forward(self, x):
        return x