# expect: rejected torch_compute
# problem: softmax
# torch.nn.functional imported at the very bottom and used above the import: imports are bound
# before any use is checked, so the use still resolves to the namespace
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return fn.softmin(-y, dim=-1)


import torch.nn.functional as fn  # noqa: E402
