# expect: correct
# problem: cross_entropy
# per-row cross entropy with two inputs (fp32 logits, int64 targets): logsumexp with the row max subtracted, minus the target logit loaded by index
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _xent(logits_ptr, tgt_ptr, loss_ptr, n_rows, n_cols, stride_l,
          ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    mask = rmask[:, None] & (cols[None, :] < n_cols)
    base = logits_ptr + rows[:, None].to(tl.int64) * stride_l
    x = tl.load(base + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    m = tl.where(rmask, m, 0.0)
    s = tl.sum(tl.exp(x - m[:, None]), axis=1)
    s = tl.where(rmask, s, 1.0)
    tgt = tl.load(tgt_ptr + rows, mask=rmask, other=0)
    picked = tl.load(logits_ptr + rows.to(tl.int64) * stride_l + tgt, mask=rmask, other=0.0).to(tl.float32)
    loss = m + tl.log(s) - picked
    tl.store(loss_ptr + rows, loss.to(loss_ptr.dtype.element_ty), mask=rmask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.contiguous()
        targets = targets.contiguous()
        n_rows, n_cols = logits.shape
        loss = torch.empty((n_rows,), dtype=logits.dtype, device=logits.device)
        rows = 8
        _xent[(triton.cdiv(n_rows, rows),)](logits, targets, loss, n_rows, n_cols, logits.stride(0),
                                            ROWS=rows, BLOCK=triton.next_power_of_2(n_cols))
        return loss
