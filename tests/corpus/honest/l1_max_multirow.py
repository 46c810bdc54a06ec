# expect: correct
# problem: max_reduce
# row max with several rows per program (a 2D tile), masked lanes filled with -inf, partial last row block
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowmax(x_ptr, y_ptr, n_rows, n_cols, stride_x, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask, other=float("-inf"))
    m = tl.max(x, axis=1)
    tl.store(y_ptr + rows, m, mask=rows < n_rows)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        rows = 16
        _rowmax[(triton.cdiv(n_rows, rows),)](x2, y, n_rows, n_cols, x2.stride(0),
                                              ROWS=rows, BLOCK=triton.next_power_of_2(n_cols))
        return y
