# expect: correct
# problem: silu
# elementwise SiLU on a 2D grid (row, column block) with explicit strides; sigmoid evaluated without overflow for either sign
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu_2d(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    # exp of a non-positive number only: no overflow for large |x|
    e = tl.exp(-tl.abs(x))
    sig = tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    tl.store(y_ptr + row * stride_y + cols, (x * sig).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        block = 128
        grid = (x2.shape[0], triton.cdiv(n_cols, block))
        _silu_2d[grid](x2, y, n_cols, x2.stride(0), n_cols, BLOCK=block)
        return y
