# expect: correct
# problem: softmax
# family: honest twin of tensor_descriptor_past_storage, tensor_descriptor_strides_changed_after
# softmax whose result lands through desc.atomic_add into a zeroed output (a TMA reduce on Hopper): Triton 3.9's
# interpreter had no descriptor reduce, so on the cpu backend it was a runtime_error (red team 31); it runs there
# through the interpreter's bounded atomic_rmw (triton_cpu._descriptor_reduce)
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _softmax(x_desc, y_desc, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x = x_desc.load([row, 0])
    offs = tl.arange(0, BLOCK)[None, :]
    x = tl.where(offs < n_cols, x, -float("inf"))
    m = tl.max(x, axis=1)[:, None]
    e = tl.exp(x - m)
    y_desc.atomic_add([row, 0], e / tl.sum(e, axis=1)[:, None])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.zeros_like(x)
        block = triton.next_power_of_2(x.shape[1])
        xd = TensorDescriptor.from_tensor(x, [1, block])
        yd = TensorDescriptor.from_tensor(y, [1, block])
        _softmax[(x.shape[0],)](xd, yd, x.shape[1], BLOCK=block)
        return y
