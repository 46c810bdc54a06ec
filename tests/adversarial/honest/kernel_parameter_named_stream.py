# expect: correct
# problem: silu
# family: honest twin of launch_option_named_parameter
# a kernel whose parameter is named like a launch option (stream, an int it ignores), launched with num_warps= too
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, stream, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _silu[(triton.cdiv(n, 1024),)](x, y, n, 0, BLOCK=1024, num_warps=4)
        return y
