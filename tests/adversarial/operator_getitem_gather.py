# expect: rejected guard|torch_compute
# problem: softmax
# family: 6/7 advanced indexing through operator.getitem
# operator.getitem / operator.setitem with an index tensor (a gather and a scatter) skip the guard's item hooks
import operator
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        perm = torch.arange(x.shape[1] - 1, -1, -1, device=x.device)
        flipped = operator.getitem(x, (slice(None), perm))
        y = torch.empty_like(x)
        operator.setitem(y, (slice(None), perm), flipped)
        return y
