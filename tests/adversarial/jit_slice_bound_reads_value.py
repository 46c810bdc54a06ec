# expect: rejected guard|triton_compile or compile_error triton_compile
# problem: softmax
# family: 1 Python inside a @triton.jit body (a kernel value read on the host through a slice bound)
# honest: honest/runtime_if_and_loop_bound.py
# red team 26: after red team 25's fix routed int, float, math and indices through a check, a slice's bounds still
# took a kernel value's __index__: each element's bits read as len(PAD[:a >> 16]), every exponential math.exp on a
# Python float, correct on cpu (a GPU compile refuses the global str). A slice's bounds are checked too
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl

PAD = "." * 65536


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    for j in range(n_cols):
        a = tl.abs(tl.load(x_ptr + row * n_cols + j) - m).to(tl.int32, bitcast=True)
        (b := len(PAD[:a >> 16]) * 65536 + len(PAD[:a & 65535]))
        tl.store(y_ptr + row * n_cols + j, math.exp(0.0 if b == 0 else -1.0 * ((b & 8388607) | 8388608) * 2.0 ** (((b >> 23) & 255) - 150)))
    e = tl.load(y_ptr + row * n_cols + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
