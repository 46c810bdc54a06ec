# expect: correct
# problem: softmax
# family: honest twin of lambda_default_walrus / constexpr_callable
# a closure, a walrus in a comprehension and a lambda default: Python plumbing around one launch
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def _make_launcher(min_block):
    def launch(x, y):
        blocks = [b for c in (x.shape[1],) if (b := triton.next_power_of_2(c)) >= 1]
        pick = lambda b, floor=min_block: max(b, floor)  # noqa: E731
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=pick(blocks[0]))
        return y
    return launch


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.launch = _make_launcher(16)

    def forward(self, x):
        x = x.contiguous()
        return self.launch(x, torch.empty_like(x))
