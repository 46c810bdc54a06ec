# problem: level1/5_Matrix_scalar_multiplication.py
# kind: triton
# elementwise A * s (s a runtime fp32 scalar) over the flat matrix in 4096-element blocks, int64 offsets
# cpu_sizes: {"M": 37, "N": 411}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    # int64 offsets: the flat tensor can hold more than 2^31 elements
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * s
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        x = A.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        block = 4096
        _scale_kernel[(triton.cdiv(n, block),)](x, y, n, float(s), BLOCK=block, num_warps=8)
        return y
