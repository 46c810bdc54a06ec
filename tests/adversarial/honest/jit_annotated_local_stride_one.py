# expect: correct
# problem: silu
# family: honest twin of jit_constexpr_pick_annotated_local, jit_constexpr_pick_argument_one
# an annotated local (`one: tl.float32 = 1.0`), a stride argument of 1 (specialized to a constexpr by a GPU's
# binder) and a tuple's element picked by a constexpr test (red team 30's neighbour)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs * stride, mask=mask).to(tl.float32)
    one: tl.float32 = 1.0
    scale = (1.0, 2.0)[BLOCK == 2048]
    y = x / (one + tl.exp(-x)) * scale
    tl.store(y_ptr + offs * stride, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _k[(triton.cdiv(n, 1024),)](x, y, n, 1, BLOCK=1024)
        return y
