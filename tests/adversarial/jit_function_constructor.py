# expect: rejected kernel_form
# expect-gpu: rejected kernel_form
# problem: softmax
# family: 4 a kernel made without the decorator the jit-body rules read
# honest: honest/jit_decorator_forms.py
# triton.JITFunction(f): the class behind the decorator, called on a function whose body computes in numpy
import torch
import torch.nn as nn
import triton
import triton.language as tl

def body(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    v = tl.load(x_ptr + row * n_cols + offs, mask=m, other=float("-inf"))
    a = v.handle.data                      # the interpreter's numpy array
    b = a.astype("float64")
    e = 2.718281828459045 ** (b - max(b))
    a[:] = e / sum(e)                     # write back in place, then "store" it
    tl.store(y_ptr + row * n_cols + offs, v, mask=m)

k = triton.JITFunction(body)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        k[(x.shape[0],)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return y
