# expect: correct
# problem: gelu
# elementwise exact GELU through tl.erf over the flattened tensor, fp32 math, masked tail block
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_erf(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 512
        _gelu_erf[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
        return y
