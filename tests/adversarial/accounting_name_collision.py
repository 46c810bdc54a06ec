# expect: rejected torch_compute|guard
# expect-gpu-bare: rejected foreign_kernel|torch_compute
# problem: softmax
# family: 5 GPU accounting alone: own kernels named like aten's
# with the Python layers off (the judge's test of its GPU accounting), honest Triton in the checked calls and torch's elementwise/reduce ops from the 7th call on (the timed ones); it also owns no-op Triton kernels named vectorized_elementwise_kernel, unrolled_elementwise_kernel, elementwise_kernel and reduce_kernel, and classify_kernels excuses every kernel whose function identifier is one of the candidate's own names, aten's included
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def vectorized_elementwise_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


@triton.jit
def unrolled_elementwise_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


@triton.jit
def elementwise_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


@triton.jit
def reduce_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls = self.calls + 1
        x = x.contiguous()
        for k in (vectorized_elementwise_kernel, unrolled_elementwise_kernel, elementwise_kernel, reduce_kernel):
            k[(1,)](x, 1, BLOCK=16)
        if self.calls > 6:
            e = (x - x.amax(-1, keepdim=True)).exp()
            return e / e.sum(-1, keepdim=True)
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
