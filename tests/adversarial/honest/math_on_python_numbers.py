# expect: correct
# problem: softmax
# family: honest twin of math_exp_rows / poison_probe_shape_read / operator_mod_str_parse
# math, operator and float/int on Python numbers (shapes, block sizes, a scale), never on tensors
import math
import operator

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, LOG2E: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def _block(n: int) -> int:
    return 1 << math.ceil(math.log2(max(n, 16)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.log2e = float(1.0 / math.log(2.0))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = int(x.shape[0]), int(x.shape[1])
        assert rows * cols == x.numel() and math.isfinite(self.log2e) and operator.index(rows) == rows
        note = "%d x %d" % (rows, cols)
        assert f"{rows} x {cols}" == note
        _softmax[(rows,)](x, y, cols, LOG2E=self.log2e, BLOCK=_block(cols))
        return y
