# expect: correct
# problem: softmax
# family: honest twin of jit_slice_bound_reads_value / jit_store_into_module_attr / jit_math_on_kernel_values
# red team 26's neighbour: a kernel-side `if` on a runtime scalar, loops with a runtime bound, a float constant local,
# and host calls of triton.next_power_of_2 / triton.cdiv and math.pi
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    LOG2E = 1.4426950408889634
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for i in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + i + offs, mask=i + offs < n_cols, other=float("-inf"))
        m = tl.maximum(m, x)
    mx = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + i + offs, mask=i + offs < n_cols, other=float("-inf"))
        s += tl.exp2((x - mx) * LOG2E)
    total = tl.sum(s, axis=0)
    if total > 0:
        inv = 1.0 / total
    else:
        inv = 0.0 * total
    for i in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + i + offs, mask=i + offs < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * n_cols + i + offs, tl.exp2((x - mx) * LOG2E) * inv, mask=i + offs < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(x.shape[1]), 128)
        assert triton.cdiv(x.shape[1], block) >= 1 and math.pi > 3.14
        _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=block)
        return y
