# expect: correct
# problem: softmax
# family: honest twin of sequential_layer_call / forward_hook_dict
# nn.Sequential of the candidate's own modules, called in forward (torch's container, the candidate's compute)
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


class _Contig(nn.Module):
    def forward(self, x):
        return x.contiguous()


class _Kernel(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(_Contig(), _Kernel())

    def forward(self, x):
        return self.body(x)
