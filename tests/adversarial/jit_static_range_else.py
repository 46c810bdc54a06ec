# expect: rejected guard
# problem: silu
# family: 1 Python inside a @triton.jit body (a loop's else block: walked by the front end, run by Python)
# honest: honest/jit_helper_two_specializations.py
# red team 28: Triton's front end only walks a static_range loop's else block (generic_visit: its assignments bind
# nothing, so the names keep their constexpr values and everything in it folds), and the interpreter runs Python's
# for-else, which rebinds them to the loaded bits and computes SiLU with math.exp. Its first statement (`pid + 0`)
# had the place of its own value, which the walk records, so the block passed as reached. A loop's else is refused
# in a jit body (jit_rules._split_form); a place now says whether it is a statement (triton_frontend.place), so a
# walked statement is not a reached one (test_sandbox's `loop_else` kernel).
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    v: tl.constexpr = 7
    m: tl.constexpr = 7
    f: tl.constexpr = 0.5
    for i in tl.static_range(1):
        pass
    else:
        pid + 0
        v = x.to(tl.uint32, bitcast=True)
        m: tl.constexpr = len(range(v))
        f: tl.constexpr = (1 - 2 * (m >> 31)) * ((m & 8388607) | 8388608) * 2.0 ** (((m >> 23) & 255) - 150)
        tl.store(y_ptr + pid, f / (1.0 + math.exp(-f)))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.numel(),)](x, y, x.numel())
        return y
