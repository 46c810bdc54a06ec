# expect: runtime_error exception or rejected guard|introspection
# problem: softmax
# family: 6 a type built at run time with the judge's module name
# honest: honest/dataclass_config.py
# type() (not among the builtins a candidate gets) called with a namespace whose __module__ names the judge's
# load_cuda module (megakernel_gym.cuda.nvrtc since the package split), so the guard would take the object
# for a module of the candidate's kernels
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



FAKE = type("CudaModule", (), {"__module__": "megakernel_gym.cuda.nvrtc", "finish": lambda self, y: y})()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return FAKE.finish(y)
