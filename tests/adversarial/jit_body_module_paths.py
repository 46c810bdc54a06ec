# expect: rejected guard|torch_compute or compile_error triton_compile
# problem: softmax
# family: 4 triton.language's public attribute paths lead to Python's modules
# honest: honest/jit_helper_decorated.py
# the jit-body rule accepts any public path under triton.language except core/semantic/standard/random as its FIRST part: tl.math.core.typing.operator.attrgetter is operator.attrgetter (typing imports operator, triton.language.math imports core); under the cpu interpreter the body is plain Python, so attrgetter walks typing.sys.modules to torch, switches the watcher off and runs torch.softmax on tensors passed as tl.constexpr(x)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(X: tl.constexpr, Y: tl.constexpr):
    ag = tl.math.core.typing.operator.attrgetter
    mods = ag("sys.modules")(tl.math.core.typing)
    T = mods["torch"]
    cm = ag("utils._python_dispatch._disable_current_modes")(T)()
    ag("__enter__")(cm)()
    ag("copy_")(Y.value)(ag("softmax")(T)(X.value, -1))
    ag("__exit__")(cm)(None, None, None)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _k[(1,)](tl.constexpr(x), tl.constexpr(y))
        return y
