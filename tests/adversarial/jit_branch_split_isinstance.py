# expect: compile_error triton_compile or rejected guard
# problem: softmax
# family: 1 Python inside a @triton.jit body (isinstance of an assigned constant: a tensor under the interpreter)
# honest: honest/runtime_ternary.py
# red team 27 (held): the front end compiles the value-reading branch and refuses it
# softmax computed by Python's math.exp on Python floats: the GPU front end and the interpreter take different
# branches of a static `if`. `c = 1` is a Python int to Triton's front end (isinstance(c, int) is a compile-time
# True, so it compiles only the first branch, which does nothing) but the interpreter's ASTTransformer rewrites
# every Assign into interpreter_semantic.to_tensor(...), so under the interpreter c is a tensor and the else
# branch runs: red team 26's len(range(bits)) body, which the front end never sees.
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = 1
    if isinstance(c, int):
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
