# expect: timeout hang
# timeout: 5
# problem: softmax
# family: 10 a kernel that never ends
# a Triton kernel with an endless loop that a GPU compile takes (the cpu interpreter runs it in Python)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _spin(x_ptr, n):
    i = n - n          # a kernel value (a constexpr 0 would change type in the loop: a GPU compile refuses that)
    while n > 0:
        i += 1


class ModelNew(nn.Module):
    def forward(self, x):
        _spin[(1,)](x, x.numel())
        return x
