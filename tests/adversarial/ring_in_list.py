# expect: rejected output_alias
# expect-gpu: rejected output_alias|incorrect
# problem: softmax
# family: 8 output aliases a buffer hidden from the check
# honest: honest/parameter_randn_init.py
# red team 18: the outputs are slots of a ring buffer kept in a plain list (the alias check walked tensor attributes, parameters and buffers only): every output must be memory the call allocated
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.slot = 0
        self.held = []          # a list: not a tensor attribute, not a buffer

    def forward(self, x):
        x = x.contiguous()
        if len(self.held) == 0:
            self.held.append(torch.empty((8, *x.shape), device=x.device, dtype=x.dtype))
        y = self.held[0][self.slot % 8]
        self.slot = self.slot + 1
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
