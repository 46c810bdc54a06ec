# expect: correct
# problem: log_softmax
# log_softmax with an online (running max, rescaled sum) sweep, then x - max - log(sum): accurate for very negative entries
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _log_softmax(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    run_max = float("-inf")
    run_sum = 0.0
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    lse = run_max + tl.log(run_sum)
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, (x - lse).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        block = 128
        _log_softmax[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), n_cols,
                                     BLOCK=block, NUM_BLOCKS=triton.cdiv(n_cols, block))
        return y
