# expect: correct
# problem: softmax
# family: honest twin of grid_lambda_torch_compute
# the usual Triton grid: a lambda of the launch's meta-parameters, computing with Python ints
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        if row < n_rows:
            x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        grid = lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)  # noqa: E731
        _softmax[grid](x, y, n_rows, n_cols, ROWS=4, BLOCK=triton.next_power_of_2(n_cols))
        return y
