# expect: rejected guard
# expect-gpu: rejected guard
# problem: softmax
# family: 1 memory outside the launch's tensors (a tensor descriptor's lists changed after it was made)
# honest: honest/tensor_descriptor_softmax.py
# red team 31: the descriptor's strides list is the candidate's own: after __post_init__ (which asserts strides[-1] == 1) the
# last stride is set to 0 and the shape's last dim to 2**20, so launch_args' reach (sum((n-1)*st)) stays inside a
# 16-element scratch tensor, while a TMA load (which takes the innermost dim as contiguous) would read 2**20
# elements. Triton's own asserts (interpreter _implicit_cvt, nvidia make_tensordesc_arg) are the only wall.
# The launch check now requires a contiguous last dimension itself (launch_args._descriptor_problem).
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _softmax(x_desc, y_desc, d, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x = x_desc.load([row, 0])
    junk = d.load([0, 0])
    offs = tl.arange(0, BLOCK)[None, :]
    x = tl.where(offs < n_cols, x, -float("inf"))
    m = tl.max(x, axis=1)[:, None]
    e = tl.exp(x - m)
    y_desc.store([row, 0], e / tl.sum(e, axis=1)[:, None] + tl.sum(junk) * 0)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        block = triton.next_power_of_2(x.shape[1])
        xd = TensorDescriptor.from_tensor(x, [1, block])
        yd = TensorDescriptor.from_tensor(y, [1, block])
        scratch = torch.zeros(16, device=x.device, dtype=x.dtype)
        shape, strides = [1, 16], [16, 1]
        d = TensorDescriptor(scratch.view(1, 16), shape, strides, [1, 256])
        strides[1] = 0
        shape[1] = 2 ** 20
        _softmax[(x.shape[0],)](xd, yd, d, x.shape[1], BLOCK=block)
        return y
