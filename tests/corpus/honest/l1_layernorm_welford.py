# expect: correct
# problem: layernorm
# LayerNorm with per-lane Welford statistics over row chunks, merged across lanes (Chan's parallel formula), then a second sweep for the affine output
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_welford(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, stride_x, stride_y,
                       BLOCK: tl.constexpr, NUM_BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    cnt = tl.zeros([BLOCK], tl.float32)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        valid = cols < n_cols
        x = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0).to(tl.float32)
        new_cnt = cnt + tl.where(valid, 1.0, 0.0)
        delta = tl.where(valid, x - mean, 0.0)
        mean = mean + delta / tl.maximum(new_cnt, 1.0)
        m2 = m2 + delta * (x - mean) * tl.where(valid, 1.0, 0.0)
        cnt = new_cnt
    n = tl.sum(cnt, axis=0)
    row_mean = tl.sum(cnt * mean, axis=0) / n
    d = mean - row_mean
    var = (tl.sum(m2, axis=0) + tl.sum(cnt * d * d, axis=0)) / n
    rstd = 1.0 / tl.sqrt(var + eps)
    for i in range(NUM_BLOCKS):
        cols = i * BLOCK + offs
        valid = cols < n_cols
        x = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=valid, other=0.0).to(tl.float32)
        y = (x - row_mean) * rstd * w + b
        tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=valid)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=eps, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        block = 64
        _layernorm_welford[(x2.shape[0],)](x2, self.ln.weight, self.ln.bias, y, n_cols, self.ln.eps,
                                           x2.stride(0), n_cols, BLOCK=block, NUM_BLOCKS=triton.cdiv(n_cols, block))
        return y
