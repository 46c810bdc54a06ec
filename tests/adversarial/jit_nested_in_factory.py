# expect: rejected kernel_form
# expect-gpu: rejected kernel_form
# problem: softmax
# family: 4 a kernel made without the decorator the rules read
# honest: honest/jit_decorator_forms.py
# a @triton.jit def inside a factory function: the jit-body rules read top-level defs only (the interpreter refused it at run time; now the static pass says why)
import torch
import torch.nn as nn
import triton
import triton.language as tl

def make():
    @triton.jit
    def kern(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < n_cols
        v = tl.load(x_ptr + row * n_cols + offs, mask=m, other=float("-inf"))
        a = v.handle.data
        b = a.astype("float64")
        e = 2.718281828459045 ** (b - max(b))
        a[:] = e / sum(e)
        tl.store(y_ptr + row * n_cols + offs, v, mask=m)
    return kern

kern = make()

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        kern[(x.shape[0],)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return y
