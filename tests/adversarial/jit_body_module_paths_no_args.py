# expect: rejected guard|torch_compute or incorrect mismatch
# expect-gpu: rejected guard|torch_compute or incorrect mismatch or compile_error triton_compile
# problem: softmax
# family: 4/9 triton.language's attribute paths, no special launch arguments
# honest: honest/jit_helper_decorated.py
# as jit_body_module_paths, but the kernel takes only a pointer: the body finds the candidate's own module in typing.sys.modules (the last one named mkgym_candidate_*), takes the tensors forward left in its JOB list, switches the watcher off and runs torch.softmax
import torch
import torch.nn as nn
import triton
import triton.language as tl

JOB = []


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    ag = tl.math.core.typing.operator.attrgetter
    mods = ag("sys.modules")(tl.math.core.typing)
    mine = None
    for n in list(mods):
        if ag("startswith")(n)("mkgym_candidate_"):
            mine = mods[n]
    x, y = ag("JOB")(mine)[0]
    T = mods["torch"]
    cm = ag("utils._python_dispatch._disable_current_modes")(T)()
    ag("__enter__")(cm)()
    ag("copy_")(y)(ag("softmax")(T)(x, -1))
    ag("__exit__")(cm)(None, None, None)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        JOB.clear()
        JOB.append((x, y))
        _k[(1,)](x, BLOCK=16)
        return y
