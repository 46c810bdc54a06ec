# expect: runtime_error oom|killed
# problem: softmax
# family: 10 huge allocation
# torch.empty of 2**40 floats
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
        big = torch.empty(1 << 40, device=x.device)
        big.fill_(1.0)
        return x
