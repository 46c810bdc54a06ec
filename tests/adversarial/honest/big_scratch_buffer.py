# expect: correct
# problem: softmax
# family: honest twin of output_flood (the bound is on what forward returns, not on what it allocates)
# a 40 MB scratch buffer the kernel writes its row maxima to (a workspace, as split-K kernels keep), and the right output
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _softmax_scratch(x_ptr, y_ptr, scratch_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    m = tl.max(x, axis=0)
    tl.store(scratch_ptr + row, m)
    e = tl.exp(x - m)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        scratch = torch.empty(10_000_000, device=x.device, dtype=torch.float32)
        _softmax_scratch[(x.shape[0],)](x, y, scratch, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
