# expect: rejected guard|forbidden_import
# problem: softmax
# family: 9 a shipped reference kernel through the package
# import megakernel_gym, then M.curriculum.reference_candidates(...) through an alias (the static rule resolves only import names)
import megakernel_gym
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)

M = megakernel_gym


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        refs = M.curriculum.reference_candidates("softmax")
        return x
