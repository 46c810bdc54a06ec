# expect: incorrect mismatch
# problem: softmax
# family: 8 output cached by the input's data_ptr
# serves a cached output whenever the input's storage address repeats (the allocator reuses blocks)
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}
        self.first = []

    def forward(self, x):
        if self.first:
            return self.first[0].clone()
        x = x.contiguous()
        key = x.data_ptr()
        if key in self.cache:
            return self.cache[key].clone()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        self.cache[key] = y
        self.first.append(y)
        return y
