# expect: correct
# problem: softmax
# family: honest twin of jit_len_range_reads_value / jit_ifexp_bisect_reads_value
# softmax with a runtime ternary on a kernel value (`m if m > -inf else 0.0`, a branch on a GPU): a GPU compile
# takes it (Triton 3.6 and 3.9), so the cpu backend runs it
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
    m = tl.max(x, axis=0)
    shift = m if m > -float("inf") else 0.0
    e = tl.exp(x - shift)
    inv = 1.0 / tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + offs, e * inv, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
