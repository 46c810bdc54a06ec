# expect: correct
# problem: sum_reduce
# reduction over the strided middle axis: one program per (batch, column block), fp32 accumulator over row chunks with a constexpr trip count
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_dim1(x_ptr, y_ptr, S, H, stride_b, stride_s, stride_yb,
              BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, S_TILES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    rows = tl.arange(0, BLOCK_S)
    cmask = cols < H
    acc = tl.zeros((BLOCK_S, BLOCK_H), dtype=tl.float32)
    for t in range(S_TILES):
        r = t * BLOCK_S + rows
        ptrs = x_ptr + b * stride_b + r[:, None] * stride_s + cols[None, :]
        acc += tl.load(ptrs, mask=(r[:, None] < S) & cmask[None, :], other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + b * stride_yb + cols, total.to(y_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, S, H = x.shape
        y = torch.empty((B, H), dtype=x.dtype, device=x.device)
        bs, bh = 8, 16
        _sum_dim1[(B, triton.cdiv(H, bh))](x, y, S, H, x.stride(0), x.stride(1), H,
                                           BLOCK_S=bs, BLOCK_H=bh, S_TILES=triton.cdiv(S, bs))
        return y
