# expect: correct
# problem: l2_normalize
# KernelBench-v3 convention: the candidate class is named `Model` (there is no ModelNew in the file)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_normalize_kernel(x_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    x = tl.load(x_ptr + row_idx * n_cols + col_offsets, mask=mask, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, axis=0))
    norm = tl.maximum(norm, eps)
    tl.store(out_ptr + row_idx * n_cols + col_offsets, (x / norm).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        l2_normalize_kernel[(n_rows,)](x, out, n_cols, self.eps, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return out
