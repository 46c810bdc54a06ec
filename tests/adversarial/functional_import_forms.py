# expect: rejected guard|torch_compute
# problem: softmax
# family: 6 imports of torch submodules
# from torch.nn.functional import softmax as pick (LLM answers import functional; nothing in it is usable)
from torch.nn.functional import softmax as pick
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        return pick(x, -1)
