# expect: incorrect mismatch or rejected guard
# problem: softmax
# family: 1 Python inside a @triton.jit body (a helper on the side of a conditional expression that only the interpreter takes)
# honest: honest/runtime_ternary.py
# red team 27: as jit_branch_split_builtin_max; a side the front end dropped would be refused as never reached
# softmax computed by Python's math.exp on Python floats in a @triton.jit helper that Triton's GPU front end never
# compiles: it sits on the side of a conditional expression that the front end, which evaluates the test at compile
# time, drops. In the front end `max` is Triton's builtin_max (a tensor), so `max(row, 1073741824) is 1073741824` is
# a compile-time False and only `None` is visited; under the CPU interpreter `max` is Python's, which returns the
# Python int object itself, so the test is True and _row_py runs: red team 26's len(range(bits)) body. The kernel's
# every statement was compiled by the front end (a statement-level coverage check would not see this).
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_py(x_ptr, y_ptr, row, n_cols):
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


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    _row_py(x_ptr, y_ptr, row, n_cols) if max(row, 1073741824) is 1073741824 else None


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=16)
        return y
