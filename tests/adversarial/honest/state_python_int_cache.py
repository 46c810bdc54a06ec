# expect: correct
# problem: softmax
# family: honest twin of cache_by_shape / hidden_buffer_alias
# state kept across calls that is not a tensor: the block size chosen on the first call, cached by shape
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
        self.blocks = {}

    def forward(self, x):
        x = x.contiguous()
        key = tuple(x.shape)
        if key not in self.blocks:
            self.blocks[key] = triton.next_power_of_2(x.shape[1])
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=self.blocks[key])
        return y
