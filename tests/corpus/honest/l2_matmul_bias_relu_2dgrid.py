# expect: correct
# problem: matmul_bias_relu
# GEMM on a plain 2D grid (no tile grouping), 32x16 tiles, BLOCK_K 16 over the weight read as [N, K] and transposed in registers, bias+ReLU epilogue
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[:, None] * K + k[None, :], mask=(rn[:, None] < N) & (k[None, :] < K), other=0.0)
        acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 32, 16, 16
        _linear_relu[(triton.cdiv(M, bm), triton.cdiv(N, bn))](x2, w, self.linear.bias, y, M, N, K,
                                                               BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
