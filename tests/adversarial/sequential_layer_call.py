# expect: rejected guard|torch_compute
# problem: softmax
# family: 7 torch layers called indirectly
# honest: honest/module_list_own_modules.py
# nn.Softmax inside an nn.ModuleDict, found through self.modules() and called
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleDict({"sm": nn.Softmax(dim=-1)})

    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        for m in self.modules():
            if isinstance(m, nn.Softmax):
                return m(x)
        return x
