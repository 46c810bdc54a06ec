# expect: rejected guard|torch_compute or incorrect mismatch or compile_error triton_compile
# expect-gpu: rejected guard|torch_compute or incorrect mismatch or compile_error triton_compile
# problem: softmax
# family: 9 the problem's Model through sys.modules
# the jit source-tail trick (see raw_tail_softmax) runs plain Python: torch.sys.modules holds the problem's module (mkgym_problem_*); its Model.forward (called directly, past the layer check), with the watcher off, writes the output
import torch
import torch.nn as nn
import triton
import triton.language as tl
JOB = []


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    note = """
def _k(x_ptr, BLOCK: tl.constexpr):
    x, y = JOB[0]
    prob = [m for n, m in list(torch.sys.modules.items()) if n.startswith("mkgym_problem_")][0]
    with torch.utils._python_dispatch._disable_current_modes():
        y.copy_(prob.Model.forward(None, x))  # """


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        JOB.clear()
        JOB.append((x, y))
        _k[(1,)](x, BLOCK=16)
        return y
