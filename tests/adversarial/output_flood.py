# expect: incorrect output_size
# problem: softmax
# family: 10 outputs that flood the host's shared memory
# honest: honest/big_scratch_buffer.py
# the right softmax, then one 40 MB tensor returned ten times: each copy would be written to /dev/shm per seed
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
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        big = torch.empty(10_000_000, device=x.device)
        return (y,) + (big,) * 10
