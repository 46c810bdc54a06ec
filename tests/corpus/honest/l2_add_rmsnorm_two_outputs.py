# expect: correct
# problem: add_rmsnorm
# fused residual add + RMSNorm returning two outputs (normed, sum) from one program per row, sum of squares in fp32
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm(x_ptr, r_ptr, w_ptr, out_ptr, sum_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    inv_rms = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (s * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(sum_ptr + row * n_cols + cols, s.to(sum_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        r2 = residual.contiguous().view(-1, n_cols)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        summed = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _add_rmsnorm[(x2.shape[0],)](x2, r2, self.weight, out, summed, n_cols, self.eps,
                                     BLOCK=triton.next_power_of_2(n_cols))
        return out, summed
