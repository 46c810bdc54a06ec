# expect: correct
# problem: softmax
# family: honest twin of tensor_index_gather / narrow_tensor_start_gather / as_strided_overlap_write
# metadata and views a candidate may use: shape, stride, numel, view, reshape, narrow and basic indexing
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
        rows, cols = x.shape
        assert x.stride(-1) == 1 and x.numel() == rows * cols and x.dim() == 2
        flat = x.contiguous().view(-1)
        x2 = flat.reshape(rows, cols)[:, :cols]
        x2 = x2.narrow(0, 0, rows)[0:rows, ...]
        y = torch.empty((rows, cols), device=x.device, dtype=x.dtype)
        _softmax[(rows,)](x2, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y.view(rows, cols)
