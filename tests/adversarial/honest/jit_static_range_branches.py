# expect: correct
# problem: silu
# family: honest twin of jit_static_range_augassign, jit_static_range_dynamic_loop_var, jit_static_range_tuple_elements
# a static_range loop whose constexpr conditions come out differently per iteration, an augmented assignment and a
# dtype test (red team 29's neighbour): each iteration checked against its own compile keeps it correct
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * (BLOCK * CHUNKS)
    for c in tl.static_range(CHUNKS):
        offs = base + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        if c == 0:
            y = x * tl.sigmoid(x)
        else:
            y = x / (1.0 + tl.exp(-x))
        if (c + x).dtype == tl.float32:
            tl.store(y_ptr + offs, y, mask=mask)
        else:
            tl.store(y_ptr + offs, y.to(tl.float32), mask=mask)
        base += BLOCK


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _silu[(triton.cdiv(n, 512),)](x, y, n, BLOCK=128, CHUNKS=4)
        return y
