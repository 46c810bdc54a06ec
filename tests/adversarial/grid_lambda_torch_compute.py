# expect: rejected torch_compute|guard
# expect-gpu: rejected guard|torch_compute|foreign_kernel
# problem: softmax
# family: 2/4 torch compute in a callback Triton runs during the launch (the grid)
# honest: honest/grid_lambda_meta.py
# the grid callable runs inside the launch (JITFunction.run / InterpretedFunction.run), a window the judge once exempted from the aten-op watcher and the guard's tensor checks; it computes the softmax with operator.* on the tensors and the kernel launched is a no-op
import functools
import math
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
        y = torch.empty_like(x)

        def grid(meta):
            e = operator.ipow(math.e, x)
            cols = e.unbind(-1)
            s = functools.reduce(operator.iadd, cols[1:], cols[0].clone())
            y.copy_(operator.truediv(e, s.unsqueeze(-1)))
            return (1,)
        _touch[grid](x, 1, BLOCK=16)
        return y
