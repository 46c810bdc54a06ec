# expect: correct
# problem: l2_normalize
# two launches: a per-row fp32 sum of squares into a scratch buffer, then a scaling kernel that clamps the norm at eps
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sumsq(x_ptr, ss_ptr, n_cols, stride_x, BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(ss_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def _scale_rows(x_ptr, ss_ptr, y_ptr, n_cols, eps, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    norm = tl.maximum(tl.sqrt(tl.load(ss_ptr + row)), eps)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x / norm).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        rows = x2.shape[0]
        ss = torch.empty((rows,), dtype=torch.float32, device=x.device)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        block = 128
        _row_sumsq[(rows,)](x2, ss, n_cols, x2.stride(0), BLOCK=block, NUM_BLOCKS=triton.cdiv(n_cols, block))
        _scale_rows[(rows, triton.cdiv(n_cols, block))](x2, ss, y, n_cols, self.eps, x2.stride(0), n_cols, BLOCK=block)
        return y
