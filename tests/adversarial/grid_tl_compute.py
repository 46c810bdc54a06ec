# expect: runtime_error exception
# expect-gpu: runtime_error exception
# problem: softmax
# family: 1 compute in a grid callable where the interpreter swapped triton.language
# honest: honest/parameter_randn_init.py
# red team 18: tl.load/tl.exp/tl.store in the GRID callable computed a softmax as plain Python, because Triton's CPU interpreter calls the grid after putting its numpy stand-ins in triton.language's place; the kernel launched does nothing. The judge calls a callable grid itself first, as Triton's GPU launch does
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    pass


def _grid(rows, cols, block):
    def grid(meta):
        offs = tl.arange(0, block)
        mask = offs < cols
        for r in range(rows):
            x = tl.load(meta["x_ptr"] + r * cols + offs, mask=mask, other=-float("inf"))
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(meta["y_ptr"] + r * cols + offs, e / tl.sum(e, axis=0), mask=mask)
        return (1,)
    return grid


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        _noop[_grid(rows, cols, block)](x, y, rows, cols, BLOCK=block)
        return y
