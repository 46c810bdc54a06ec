# expect: correct
# problem: embedding_gather
# gather of table rows by int64 ids: a [tokens x dim] tile per program, ids loaded once per tile, 2D masks for both tails
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gather_rows(ids_ptr, table_ptr, out_ptr, n_tokens, dim, stride_t,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tmask = toks < n_tokens
    ids = tl.load(ids_ptr + toks, mask=tmask, other=0)
    mask = tmask[:, None] & (cols[None, :] < dim)
    vals = tl.load(table_ptr + ids[:, None].to(tl.int64) * stride_t + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + toks[:, None].to(tl.int64) * dim + cols[None, :], vals, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, vocab: int, dim: int, dtype: torch.dtype):
        super().__init__()
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        w = self.table.weight
        dim = w.shape[1]
        flat = ids.contiguous().view(-1)
        n = flat.numel()
        out = torch.empty((*ids.shape, dim), dtype=w.dtype, device=w.device)
        bt, bd = 16, 32
        _gather_rows[(triton.cdiv(n, bt), triton.cdiv(dim, bd))](flat, w, out, n, dim, w.stride(0),
                                                                 BLOCK_T=bt, BLOCK_D=bd)
        return out
