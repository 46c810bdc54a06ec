# expect: correct
# problem: embedding_gather
# family: honest twin of list_index_gather / narrow_tensor_start_gather / tensor_index_gather
# the gather in a Triton kernel: ids read on the device, one table row per program
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gather(ids_ptr, table_ptr, out_ptr, dim, BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    row = tl.load(ids_ptr + tok)
    offs = tl.arange(0, BLOCK)
    m = offs < dim
    tl.store(out_ptr + tok * dim + offs, tl.load(table_ptr + row * dim + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, vocab, dim, dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids):
        w = self.table.weight.contiguous()
        ids = ids.contiguous()
        dim = w.shape[1]
        out = torch.empty((*ids.shape, dim), device=w.device, dtype=w.dtype)
        _gather[(ids.numel(),)](ids, w, out, dim, BLOCK=triton.next_power_of_2(dim))
        return out
