# expect: correct
# problem: softmax
# family: honest twin of triton_store_outside_arguments
# softmax through exp2 with LOG2E = log2(math.e); BLOCK 512 over rows of 300, so the masked tail lanes address
# past both tensors' storage and are not read
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

LOG2E = math.log2(math.e)


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, log2e, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp2((x - tl.max(x, axis=0)) * log2e)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], LOG2E, BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
