# expect: rejected guard
# problem: softmax
# family: 1 Python inside a @triton.jit body (the front end and the interpreter take different branches: a walrus and `is`)
# honest: honest/jit_builtin_max_block.py
# red team 27: the front end compiled the `pass` branch, the interpreter ran red team 26's value-reading body; each
# condition the interpreter evaluates is now checked against the front end's record of the launch (SameBranches)
# softmax computed by Python's math.exp on Python floats: Triton's GPU front end and the CPU interpreter take
# different branches of one compile-time `if`. The front end makes a walrus's value a tensor (visit_NamedExpr ->
# visit_Assign -> to_tensor), so `(c := 1) is not 1` is a compile-time True and it compiles only the
# `pass` branch. The interpreter's ASTTransformer rewrites Assign only, never NamedExpr, so there c is the Python
# int 1 (the very object 1), the test is False, and the else branch runs: red team 26's len(range(bits)) body, which the front end
# never compiled.
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if (c := 1) is not 1:
        pass
    else:
        (mx := -1e30)
        for j in range(n_cols):
            (b := len(range(tl.load(x_ptr + row * n_cols + j).to(tl.uint32, bitcast=True))))
            (f := (1 - 2 * (b >> 31)) * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150))
            (mx := f if f > mx else mx)
        (s := 0.0)
        for j in range(n_cols):
            (b := len(range(tl.load(x_ptr + row * n_cols + j).to(tl.uint32, bitcast=True))))
            (f := (1 - 2 * (b >> 31)) * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150))
            (s := s + math.exp(f - mx))
        for j in range(n_cols):
            (b := len(range(tl.load(x_ptr + row * n_cols + j).to(tl.uint32, bitcast=True))))
            (f := (1 - 2 * (b >> 31)) * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150))
            tl.store(y_ptr + row * n_cols + j, math.exp(f - mx) / s)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=16)
        return y
