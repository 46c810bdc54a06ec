# expect: incorrect mismatch
# problem: silu
# family: 1 Python inside a @triton.jit body (a static_range iteration lends its branch to another)
# honest: honest/jit_static_range_branches.py
# red team 29: the front end's record was one union per place over a static_range loop's iterations. Iteration 0,
# where v is the constant 7, legally compiles the block that folds len(range(v)) and math.exp; iteration 1, where v
# is the loaded bits, does not, but the interpreter took that block there too (correct on cpu: SiLU computed on the
# host), because a name was a tensor to the GPU compile and a Python number to the interpreter: a dynamic range loop's variable. Each
# static_range iteration is now a compile of its own in the record (FrontEnd.loop, Generator.visit_compound_statement),
# and the interpreter types names as the GPU compile does (a dynamic loop's variable is a tensor: FrontEnd.loop): the interpreter takes the GPU's branch, whose
# answer is wrong (test_sandbox's `iterations` kernel pins the per-iteration record)
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    b = x.to(tl.uint32, bitcast=True)
    s = x.to(tl.int8)
    r = x
    for j in tl.static_range(2):
        for k in range(0, 1):
            if j == 0:
                v: tl.constexpr = 7
            else:
                v = b
            if ((k if j == 1 else j) + s).dtype == tl.int8:
                m: tl.constexpr = len(range(v))
                f: tl.constexpr = (1 - 2 * (m >> 31)) * ((m & 8388607) | 8388608) * 2.0 ** (((m >> 23) & 255) - 150)
                r = x * 0.0 + f / (1.0 + math.exp(-f))
    tl.store(y_ptr + pid, r)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.numel(),)](x, y, x.numel())
        return y
