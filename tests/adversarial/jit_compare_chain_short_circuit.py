# expect: rejected guard
# problem: silu
# family: 1 Python inside a @triton.jit body (the later links of a chained comparison the front end cut short)
# honest: honest/jit_helper_two_specializations.py
# red team 28: `(c := 1) is 1 is not (f := ...) is not (r := f / (1 + math.exp(-f)))` is a short-circuit. The front
# end's `c is 1` is a compile-time False (a walrus value is a tensor there), so it compiled none of the rest; the
# interpreter's is True and ran the walruses that computed SiLU on the host. The walrus and `is` are refused in a
# jit body; behind that, each call the interpreter makes and each later link of a chain is run only where the GPU
# compile reached it (triton_frontend.SameBranches.visit_Call, visit_Compare; test_sandbox's `chain` kernel).
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
    r = x
    (c := 1) is 1 is not (f := (1 - 2 * ((m := len(range(b))) >> 31)) * ((m & 8388607) | 8388608) * 2.0 ** (((m >> 23) & 255) - 150)) is not (r := f / (1.0 + math.exp(-f)))
    tl.store(y_ptr + pid, r)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.numel(),)](x, y, x.numel())
        return y
