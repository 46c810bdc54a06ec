# expect: correct
# problem: softmax
# family: honest twin of module_def_shadows_jit_builtin
# Triton's own min/max builtins in the body, and a module-level helper whose name is not a builtin's
import torch
import torch.nn as nn
import triton
import triton.language as tl


def block_for(n):
    return triton.next_power_of_2(n)


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    m = max(tl.max(x, axis=0), -1e30)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + offs, e / max(s, 1e-30), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=block_for(x.shape[1]))
        return y
