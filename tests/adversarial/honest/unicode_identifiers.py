# expect: correct
# problem: softmax
# family: honest twin of unicode_nfkc_dunder
# non-ASCII identifiers (Python allows them; NFKC leaves these unchanged)
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
        self.größe_min = 16

    def forward(self, x):
        x = x.contiguous()
        ausgabe = torch.empty_like(x)
        zeilen, spalten = x.shape
        λ = max(self.größe_min, triton.next_power_of_2(spalten))
        _softmax[(zeilen,)](x, ausgabe, spalten, BLOCK=λ)
        return ausgabe
