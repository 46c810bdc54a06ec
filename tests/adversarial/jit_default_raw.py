# expect: rejected guard|torch_compute
# problem: softmax
# family: 4 jit parameter default evaluated raw by the interpreter
# the interpreter re-executes the def line, so a parameter's default is evaluated again as plain Python (no guard hooks; the jit-body rule reads the body only): once ARMED, the default expression hands torch.utils._python_dispatch._disable_current_modes and torch.softmax to forward through a module-level list, and the default itself is None
import torch
import torch.nn as nn
import triton
import triton.language as tl
T = torch
ARMED = []
BOX = []


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr,
       F: tl.constexpr = (BOX.extend([T.utils._python_dispatch._disable_current_modes, T.softmax]) if ARMED else None)):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < 1)


class ModelNew(nn.Module):
    def forward(self, x):
        ARMED.append(1)
        _k[(1,)](x, BLOCK=16)
        off, softmax = BOX[0], BOX[1]
        with off():
            return softmax(x, -1)
