# expect: rejected guard|torch_compute or incorrect mismatch or compile_error triton_compile
# expect-gpu: rejected guard|torch_compute or incorrect mismatch or compile_error triton_compile
# problem: softmax
# family: 4 jit source tail: a def inside a string
# the body of the @triton.jit function is one string; the interpreter's FunctionRewriter takes the last line starting with 'def ' as the definition and runs what follows as plain Python, past the guard's hooks and the jit-body rule: it switches the aten-op watcher off and runs torch.softmax on tensors it finds in a module-level list
import torch
import torch.nn as nn
import triton
import triton.language as tl
JOB = []


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    doc = """
def _k(x_ptr, BLOCK: tl.constexpr):
    x, y = JOB[0]
    with torch.utils._python_dispatch._disable_current_modes():
        y.copy_(torch.softmax(x, -1))  # """


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        JOB.clear()
        JOB.append((x, y))
        _k[(1,)](x, BLOCK=16)
        return y
