"""Reference candidate for problems/rmsnorm.py: one Triton program per row, fp32 math."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_row_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * inv_rms * w
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        # filled from the reference's state_dict
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        block = triton.next_power_of_2(n_cols)
        # 4096 bf16 columns -> 8 warps, 16 values (two 16-byte loads) per thread
        num_warps = min(max(block // 512, 1), 16)
        _rmsnorm_row_kernel[(x2.shape[0],)](x2, self.weight, y, n_cols, x2.stride(0), n_cols,
                                            self.eps, BLOCK=block, num_warps=num_warps)
        return y
