# expect: correct
# problem: cumsum
# blocked inclusive scan (tl.cumsum within a block) with an fp32 running total carried across blocks of the row
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cumsum_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    carry = 0.0
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        s = tl.cumsum(x, axis=0) + carry
        tl.store(y_ptr + row * stride_y + cols, s.to(y_ptr.dtype.element_ty), mask=mask)
        carry = carry + tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        block = 64
        _cumsum_rows[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), n_cols,
                                     BLOCK=block, NUM_BLOCKS=triton.cdiv(n_cols, block))
        return y
