"""Reference candidate for problems/layernorm.py: one Triton program per row, row in registers.

The mean and the variance are two passes over the row held in registers (not E[x^2]-E[x]^2),
so a large common offset in x costs no precision.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        # same parameter names as the reference (ln.weight, ln.bias); the values are loaded
        # from the reference's state_dict
        self.ln = nn.LayerNorm(dim, eps=eps, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        block = triton.next_power_of_2(n_cols)
        # about 16 fp32 values per thread: 4096 columns -> 8 warps
        num_warps = min(max(block // 512, 1), 16)
        _layernorm_row_kernel[(x2.shape[0],)](x2, self.ln.weight, self.ln.bias, y, n_cols,
                                              x2.stride(0), n_cols, self.ln.eps,
                                              BLOCK=block, num_warps=num_warps)
        return y
