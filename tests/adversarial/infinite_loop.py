# expect: timeout hang
# timeout: 5
# problem: softmax
# family: 10 infinite loop in forward
# while True in forward: the judge must time out and replace the worker
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
        n = 0
        while True:
            n = n + 1
        return x
