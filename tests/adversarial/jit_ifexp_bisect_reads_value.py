# expect: compile_error triton_compile or rejected guard
# expect-gpu: compile_error triton_compile or rejected guard
# problem: softmax
# family: 1 Python inside a @triton.jit body (a kernel value read on the host by bisection with A if v > t else B)
# honest: honest/runtime_ternary.py
# red team 26: the interpreter evaluates `A if kernel_bool else B` with the tensor's __bool__, so a binary search read
# each element's bits into a Python int; every exponential was math.exp on a Python float, correct on cpu (73 s a
# judging). Triton's GPU front end, run on each launched kernel first, types the result a kernel value and refuses
# the host arithmetic on it
# softmax: the max and the final division are Triton's; every exponential is Python's math.exp on a Python float.
# Each element is read on the host by a binary search of kernel comparisons (`A if kernel_bool else B`: the
# interpreter tensor's __bool__) over its bits, kept as a Python int in a walrus local, decoded with Python arithmetic
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
    for j in range(n_cols):
        d = tl.load(x_ptr + row * n_cols + j) - m
        a = tl.abs(d).to(tl.int32, bitcast=True)
        (b := 0)
        (b := b + (1073741824 if a >= b + 1073741824 else 0))
        (b := b + (536870912 if a >= b + 536870912 else 0))
        (b := b + (268435456 if a >= b + 268435456 else 0))
        (b := b + (134217728 if a >= b + 134217728 else 0))
        (b := b + (67108864 if a >= b + 67108864 else 0))
        (b := b + (33554432 if a >= b + 33554432 else 0))
        (b := b + (16777216 if a >= b + 16777216 else 0))
        (b := b + (8388608 if a >= b + 8388608 else 0))
        (b := b + (4194304 if a >= b + 4194304 else 0))
        (b := b + (2097152 if a >= b + 2097152 else 0))
        (b := b + (1048576 if a >= b + 1048576 else 0))
        (b := b + (524288 if a >= b + 524288 else 0))
        (b := b + (262144 if a >= b + 262144 else 0))
        (b := b + (131072 if a >= b + 131072 else 0))
        (b := b + (65536 if a >= b + 65536 else 0))
        (b := b + (32768 if a >= b + 32768 else 0))
        (b := b + (16384 if a >= b + 16384 else 0))
        (b := b + (8192 if a >= b + 8192 else 0))
        (b := b + (4096 if a >= b + 4096 else 0))
        (b := b + (2048 if a >= b + 2048 else 0))
        (b := b + (1024 if a >= b + 1024 else 0))
        (b := b + (512 if a >= b + 512 else 0))
        (b := b + (256 if a >= b + 256 else 0))
        (b := b + (128 if a >= b + 128 else 0))
        (b := b + (64 if a >= b + 64 else 0))
        (b := b + (32 if a >= b + 32 else 0))
        (b := b + (16 if a >= b + 16 else 0))
        (b := b + (8 if a >= b + 8 else 0))
        (b := b + (4 if a >= b + 4 else 0))
        (b := b + (2 if a >= b + 2 else 0))
        (b := b + (1 if a >= b + 1 else 0))
        tl.store(y_ptr + row * n_cols + j, math.exp(0.0 if b == 0 else -1.0 * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150)))
    e = tl.load(y_ptr + row * n_cols + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
