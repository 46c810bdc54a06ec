# expect: rejected torch_compute
# problem: softmax
# torch.nn.functional used in forward (importing it alone is fine: the rule fires on use)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x):
        return F.softmax(x, -1)