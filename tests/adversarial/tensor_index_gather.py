# expect: rejected guard
# problem: embedding_gather
# family: 7 indexing with a tensor (a gather)
# honest: honest/embedding_gather_kernel.py
# self.table.weight[ids]: advanced indexing is an aten gather, not a view
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, vocab, dim, dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids):
        _touch[(1,)](ids, 1, BLOCK=16)
        return self.table.weight[ids]
