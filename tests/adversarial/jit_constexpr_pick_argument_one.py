# expect: rejected guard or incorrect mismatch or runtime_error
# problem: silu
# family: 1 Python inside a @triton.jit body (a compile-time pick of a tuple's element the two make apart)
# honest: honest/jit_annotated_local_stride_one.py
# red team 30: `v: tl.constexpr = (7, b)[<a dtype test>]`. The GPU compile and the interpreter computed the test
# apart (an int argument equal to 1 is specialized to constexpr(1) by the GPU's binder, an int32 tensor under the interpreter), so the front end bound v to the constant 7 (len(range(7)) and math.exp fold) and the interpreter
# to the loaded bits b, which len(range(v)) read into Python: SiLU on the host, correct on cpu. A choice of a
# tuple's element is no branch, so the record of conditions never saw it. Now every comparison is checked against
# the front end's record wherever it is used (SameBranches.visit_Compare), an annotated local is typed as the GPU
# compile types it and a tl.constexpr name never holds a kernel value (FrontEnd.annotated), and len, range and list
# refuse a kernel value as int and float do (triton_cpu._HostReads)
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, one):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    b = x.to(tl.uint32, bitcast=True)
    s = x.to(tl.int8)
    v: tl.constexpr = (7, b)[(one + s).dtype == tl.int32]
    m: tl.constexpr = len(range(v))
    f: tl.constexpr = (1 - 2 * (m >> 31)) * ((m & 8388607) | 8388608) * 2.0 ** (((m >> 23) & 255) - 150)
    r = x * 0.0 + f / (1.0 + math.exp(-f))
    tl.store(y_ptr + pid, r)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.numel(),)](x, y, x.numel(), 1)
        return y
