# expect: rejected guard|torch_compute|monkeypatch or runtime_error exception or compile_error triton_compile
# expect-gpu: rejected guard|torch_compute|monkeypatch or runtime_error exception or compile_error triton_compile
# problem: softmax
# family: 1 watcher off: jit source tail run raw by the interpreter
# Triton's interpreter re-reads a @triton.jit function from its file and starts at the LAST line that begins with 'def ' (FunctionRewriter._find_def): a def inside a string in the body is run instead, as plain Python with no guard hooks; it hands forward _disable_current_modes and torch.softmax
import torch
import torch.nn as nn
import triton
import triton.language as tl

BOX = []


@triton.jit
def _arm(x_ptr, BLOCK: tl.constexpr):
    note = """
def _arm(x_ptr, BLOCK: tl.constexpr):
    BOX.append(torch.utils._python_dispatch._disable_current_modes)
    BOX.append(torch.softmax)  # """


class ModelNew(nn.Module):
    def forward(self, x):
        _arm[(1,)](x, BLOCK=16)
        off, softmax = BOX[0], BOX[1]
        with off():
            return softmax(x, -1)
