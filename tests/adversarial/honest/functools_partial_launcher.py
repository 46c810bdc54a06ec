# expect: correct
# problem: silu
# family: honest twin of reduce_getattr / starargs_getattr
# functools.partial over a launcher, *args/**kwargs forwarding, heuristics computing a constexpr
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, x * tl.sigmoid(x))
    else:
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=m)


def _launch(x, y, block, *rest, **meta):
    n = x.numel()
    _silu[(triton.cdiv(n, block),)](x, y, n, *rest, BLOCK=block, **meta)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.run = functools.partial(_launch, block=256)

    def forward(self, x):
        x = x.contiguous()
        args = (x, torch.empty_like(x))
        return self.run(*args)
