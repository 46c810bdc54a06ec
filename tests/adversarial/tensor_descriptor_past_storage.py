# expect: rejected guard
# expect-gpu: rejected guard
# problem: softmax
# family: 1 memory outside the launch's tensors (a tensor descriptor whose shape reaches past its base)
# honest: honest/tensor_descriptor_softmax.py
# A TensorDescriptor's shape and strides are the candidate's to set: made by hand over a one-row scratch tensor
# with the input's full shape, its loads would reach whatever memory lies past the scratch storage (on a GPU the
# TMA unit reads it; under the interpreter the launch's memory bounds refuse it). The judge refuses the launch:
# a descriptor addresses its base's own storage (launch_args._descriptor_problem).
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _softmax(x_desc, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x = x_desc.load([row, 0])
    offs = tl.arange(0, BLOCK)[None, :]
    x = tl.where(offs < n_cols, x, -float("inf"))
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=1)[:, None], mask=offs < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        block = triton.next_power_of_2(x.shape[1])
        scratch = torch.empty(1, x.shape[1], device=x.device, dtype=x.dtype)
        xd = TensorDescriptor(scratch, [x.shape[0], x.shape[1]], [x.shape[1], 1], [1, block])
        _softmax[(x.shape[0],)](xd, y, x.shape[1], BLOCK=block)
        return y
