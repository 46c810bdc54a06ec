# expect: rejected guard|torch_compute or runtime_error exception
# problem: softmax
# family: 1/6 names the Triton interpreter copies into the candidate's module
# the interpreter's first launch copies its own module globals (InterpretedFunction, inspect, time, np, _patch_attr...) into the candidate's namespace; InterpretedFunction(f) then re-runs an undecorated function from its source with no guard hooks: it switches the watcher off and runs torch.softmax (self.T.softmax passes the static rule's own-extension exemption)
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


JOB = []


def _raw(x_ptr, BLOCK: tl.constexpr):
    self, x, y = JOB[0]
    off = self.T.utils._python_dispatch._disable_current_modes
    with off():
        y.copy_(self.T.softmax(x, -1))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.T = torch

    def forward(self, x):
        y = torch.empty_like(x)
        _touch[(1,)](x, 1, BLOCK=16)
        JOB.clear()
        JOB.append((self, x, y))
        InterpretedFunction(_raw)[(1,)](x, BLOCK=16)
        return y
