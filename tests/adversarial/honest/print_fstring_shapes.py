# expect: correct
# problem: softmax
# family: honest twin of fstring_tensor / str_container_repr
# print and f-strings of shapes, dtypes and Python ints (the log), never of a tensor's values
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
        x = x.contiguous()
        rows, cols = x.shape
        print(f"softmax {tuple(x.shape)} {x.dtype} rows={rows}", str(cols), repr(x.stride()))
        y = torch.empty_like(x)
        _softmax[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
