# expect: rejected guard|torch_compute or compile_error triton_compile
# problem: softmax
# family: 4 torch tensors passed as tl.constexpr
# honest: honest/constexpr_jit_activation.py
# the interpreter passes constexpr arguments through untouched, so X and Y are the torch tensors; X.softmax(-1) passes the jit-body rule (softmax is also a triton tensor method) and runs torch's softmax inside the launch, where the aten-op watcher is off
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    Y[...] = X.softmax(-1)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
