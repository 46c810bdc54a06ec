# expect: rejected guard
# problem: softmax
# family: 3 compute outside the kernels the judge counts (a jit function called from host code)
# honest: honest/device_function_call.py
# red team 24: a direct call of an empty jit function left triton.language patched with the interpreter's functions
# (InterpretedFunction.__call__ never restores it), and forward computed softmax in host code with tl.load/tl.exp/
# tl.store, as could every later candidate in the kept worker: correct. Direct calls are refused, and tl's
# functions are in the worker's integrity snapshot
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr, y_ptr):
    pass


@triton.jit
def _nothing():
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _noop[(1,)](x, y)           # counted; the spans are x's and y's storage
        _nothing()                  # tl is the interpreter's from here on
        n_rows, n_cols = x.shape[0], x.shape[1]
        offs = tl.arange(0, triton.next_power_of_2(n_cols))
        mask = offs < n_cols
        xp = (tl.zeros([1], tl.int64) + x.data_ptr()).to(tl.pointer_type(tl.float32))
        yp = (tl.zeros([1], tl.int64) + y.data_ptr()).to(tl.pointer_type(tl.float32))
        for row in range(n_rows):
            v = tl.load(xp + row * n_cols + offs, mask=mask, other=-float("inf"))
            e = tl.exp(v - tl.max(v, axis=0))
            tl.store(yp + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)
        return y
