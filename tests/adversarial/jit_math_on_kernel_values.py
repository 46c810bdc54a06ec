# expect: rejected guard|triton_compile or compile_error triton_compile
# problem: softmax
# family: 1 Python inside a @triton.jit body (a kernel value read on the host)
# honest: honest/math_on_python_numbers.py
# red team 25: under Triton's CPU interpreter a scalar's __index__ is its value, so int() and math.exp of a kernel
# value computed each exponential on Python floats (the rules allow int and math, on constexprs as a GPU compile
# does): correct on cpu, a compile error on a GPU. The judge routes int, float, math and indexing in a rewritten
# body through a check that refuses a kernel value
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    s = 0.0
    for j in range(n_cols):
        v = tl.load(x_ptr + row * n_cols + j)
        s += math.exp(int((v - m) * 1048576.0) / 1048576.0)
    for j in range(n_cols):
        v = tl.load(x_ptr + row * n_cols + j)
        tl.store(y_ptr + row * n_cols + j, math.exp(int((v - m) * 1048576.0) / 1048576.0) / s)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
