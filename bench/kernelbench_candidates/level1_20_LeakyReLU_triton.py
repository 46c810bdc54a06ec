# problem: level1/20_LeakyReLU.py
# kind: triton
# elementwise leaky relu (x > 0 ? x : x * negative_slope) over the flat tensor in 4096-element blocks, int64 offsets
# cpu_sizes: {"batch_size": 3, "dim": 5003}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_relu_kernel(x_ptr, y_ptr, n, negative_slope, BLOCK: tl.constexpr):
    # int64 offsets: the flat tensor can hold more than 2^31 elements
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(x > 0.0, x, x * negative_slope)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        block = 4096
        _leaky_relu_kernel[(triton.cdiv(n, block),)](x, y, n, float(self.negative_slope), BLOCK=block, num_warps=8)
        return y
