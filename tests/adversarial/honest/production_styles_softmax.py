# expect: correct
# problem: softmax
# family: honest twin of jit_branch_split_*
# softmax in common production styles at once: @triton.heuristics for the block size,
# a 2-D tile load with a mask, a jit helper, tl.static_range, a while loop over
# column tiles, num_warps= at launch.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _exp_shift(x, m):
    return tl.exp(x - m)


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"])})
@triton.jit
def _softmax(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)[None, :]
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    m = tl.max(x, axis=1)[:, None]
    e = _exp_shift(x, m)
    s = tl.sum(e, axis=1)[:, None]
    for k in tl.static_range(1):
        e = e / s
    i = 0
    while i < 1:
        i += 1
    tl.store(y_ptr + row * n_cols + offs, e, mask=offs < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[0], x.shape[1], num_warps=4)
        return y
