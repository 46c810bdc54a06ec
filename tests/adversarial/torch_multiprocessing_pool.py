# expect: rejected concurrency|guard
# problem: softmax
# family: 2 process pool through torch.multiprocessing
# import torch.multiprocessing as mp (a torch submodule, not the stdlib name) and run torch.softmax in a worker process that forward starts and joins
import torch.multiprocessing as mp
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
        with mp.get_context("fork").Pool(1) as pool:
            return pool.apply(torch.softmax, (x, -1))
