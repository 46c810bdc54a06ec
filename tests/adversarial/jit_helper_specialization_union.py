# expect: rejected guard
# problem: silu
# family: 1 Python inside a @triton.jit body (a helper compiled for a constant lends its branch to its call on a kernel value)
# honest: honest/jit_helper_two_specializations.py
# red team 28: the front end's record of what it reached was one per place, a union over a helper's
# specializations. `_h(7, K=1)` legally folds its else block (len(range(7)), math.exp of a constant); the walrus
# makes the test come out otherwise under the interpreter, so `_h(bits, K=0)` ran that else block on a kernel
# value: SiLU computed by math.exp on Python floats, correct on cpu. The walrus and `is` are refused in a jit body
# (jit_rules._split_form); behind that, the record is kept per compiled function (its mangled name) and each call
# site names the functions it compiled (triton_frontend.FrontEnd.call), so the interpreter checks a helper's body
# against the compile of that helper as it was called (tests/test_sandbox.py's `union` kernel).
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _h(v, K: tl.constexpr):
    if ((c := 1) is 1) == (K == 1):
        r = v * 1.0
    else:
        b: tl.constexpr = len(range(v))
        f: tl.constexpr = (1 - 2 * (b >> 31)) * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150)
        r = f / (1.0 + math.exp(-f))
    return r


@triton.jit
def _k(x_ptr, y_ptr, n):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    d = _h(7, 1)
    tl.store(y_ptr + pid, _h(x.to(tl.uint32, bitcast=True), 0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.numel(),)](x, y, x.numel())
        return y
