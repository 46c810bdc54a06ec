# expect: rejected try_except|guard
# problem: softmax
# family: 6 except* (RestrictedPython CVE-2025-22153)
# try/except* with an exception group, the form RestrictedPython fixed a type confusion in
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
        try:
            raise ExceptionGroup("g", [ValueError(x)])
        except* ValueError as eg:
            found = eg.exceptions
        return x
