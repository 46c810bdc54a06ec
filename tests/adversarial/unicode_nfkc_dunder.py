# expect: rejected guard|introspection|torch_compute
# problem: softmax
# family: 6 identifiers that NFKC-normalize to dunders and torch names
# honest: honest/unicode_identifiers.py
# x._﹍class﹍﹍ and torch.ｓｏｆｔｍａｘ: Python NFKC-normalizes identifiers, so these are __class__ and torch.softmax
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
        cls = x._﹍class﹍﹍
        f = torch.ｓｏｆｔｍａｘ
        return f(x, -1)
