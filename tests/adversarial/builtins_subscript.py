# expect: rejected guard|introspection
# problem: softmax
# family: 6 __builtins__
# __builtins__["__import__"]("sys") for sys.modules
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
        imp = __builtins__["__import__"]
        return imp("torch.nn.functional").softmax(x, -1)
