# expect: correct
# problem: softmax
# family: honest twin of out_kwarg_arange / as_strided_overlap_write (copies a candidate may make)
# data movement a candidate may do before its kernel: empty + copy_ of a transposed view, .to(dtype), clone
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

    def forward(self, x):
        xt = x.t()
        staged = torch.empty((xt.shape[1], xt.shape[0]), device=x.device, dtype=torch.float32)
        staged.copy_(xt.t())
        staged = staged.to(x.dtype).clone()
        y = torch.zeros_like(staged)
        y[...] = 0.0
        _softmax[(staged.shape[0],)](staged, y, staged.shape[1], BLOCK=triton.next_power_of_2(staged.shape[1]))
        return y
