# expect: rejected guard
# problem: softmax
# family: 4 module-level name rebound by an import inside a block
# tl is rebound to torch by `import torch as tl` inside an `if` block after the def; the jit-body rule counts module-level bindings but misses imports nested in blocks, so tl.softmax in the body (an allowed triton.language path) is torch.softmax at run time
import triton.language as language
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    Y[...] = tl.softmax(X, -1)


if True:
    import torch as tl


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](x, y)
        return y
