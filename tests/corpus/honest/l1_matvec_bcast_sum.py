# expect: correct
# problem: matvec_decode
# skinny GEMM without tl.dot: each program owns a block of output features for one token and sums broadcast products over K chunks with tl.sum
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matvec(x_ptr, w_ptr, y_ptr, K, N, stride_x, stride_w, stride_y,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, K_TILES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    nmask = n < N
    acc = tl.zeros([BLOCK_N], tl.float32)
    for t in range(K_TILES):
        k = t * BLOCK_K + kk
        kmask = k < K
        x = tl.load(x_ptr + b * stride_x + k, mask=kmask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + n[:, None].to(tl.int64) * stride_w + k[None, :],
                    mask=nmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(y_ptr + b * stride_y + n, acc.to(y_ptr.dtype.element_ty), mask=nmask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        B = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bn, bk = 32, 16
        _matvec[(B, triton.cdiv(N, bn))](x2, w, y, K, N, x2.stride(0), w.stride(0), N,
                                         BLOCK_N=bn, BLOCK_K=bk, K_TILES=triton.cdiv(K, bk))
        return y
