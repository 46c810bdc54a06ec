# expect: correct
# problem: softmax
# family: honest twin of jit_direct_call_stale_bounds / jit_direct_call_does_the_work / jit_direct_call_leaves_tl_patched
# a @triton.jit helper called from inside the kernel body (a device function call, inside the launch)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _normalize(x):
    e = tl.exp(x - tl.max(x, axis=0))
    return e / tl.sum(e, axis=0)


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    tl.store(y_ptr + row * n_cols + offs, _normalize(x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
