# expect: rejected guard|torch_compute
# problem: embedding_gather
# family: 3/7 gather through narrow() with a tensor start
# honest: honest/embedding_gather_kernel.py
# table.narrow(0, ids[k], 1) takes a 0-d tensor as its start (aten.narrow reads it on the host); each row is copied with copy_, one no-op launch
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
        w = self.table.weight
        flat = ids.reshape(-1)
        out = torch.empty((flat.shape[0], w.shape[1]), device=ids.device, dtype=w.dtype)
        for k in range(flat.shape[0]):
            out.narrow(0, k, 1).copy_(w.narrow(0, flat[k], 1))
        _touch[(1,)](ids, 1, BLOCK=16)
        return out.view(*ids.shape, -1)
