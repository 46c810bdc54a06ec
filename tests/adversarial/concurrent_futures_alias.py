# expect: rejected concurrency
# problem: softmax
# family: 2 thread pool under another name
# from concurrent import futures as pool_lib; a ThreadPoolExecutor runs the softmax and forward waits
from concurrent import futures as pool_lib
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

SOFTMAX = torch.softmax


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        with pool_lib.ThreadPoolExecutor(1) as ex:
            return ex.submit(SOFTMAX, x, -1).result()
