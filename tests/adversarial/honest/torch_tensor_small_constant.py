# expect: correct
# problem: softmax
# family: honest twin of math_exp_rows (torch.tensor of Python numbers the candidate chose, not read back)
# a small constant tensor built with torch.tensor from Python floats, read by the kernel as a pointer
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, c_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    one = tl.load(c_ptr)
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0)) * one
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        c = torch.tensor([1.0, 0.0], dtype=torch.float32, device=x.device)
        _softmax[(x.shape[0],)](x, y, c, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
