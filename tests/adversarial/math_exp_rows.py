# expect: rejected guard
# problem: softmax
# family: 3 host compute through math on 0-d tensors
# honest: honest/math_on_python_numbers.py
# iterates the tensor (0-d views), math.exp / math.fsum read each value on the host through __float__ (aten._local_scalar_dense, which the watcher allows), the softmax is done in Python and sent back with torch.tensor; one no-op Triton launch
import math
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
        rows = []
        for row in x:
            m = max([math.fsum([v]) for v in row])
            vals = [math.exp(math.fsum([v]) - m) for v in row]
            s = math.fsum(vals)
            rows.append([v / s for v in vals])
        _touch[(1,)](x, 1, BLOCK=16)
        return torch.tensor(rows, dtype=x.dtype, device=x.device)
