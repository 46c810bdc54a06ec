# expect: correct
# problem: matmul_gelu
# GEMM + bias with a tanh-GELU epilogue on the unrounded fp32 accumulator; tanh written through exp so it saturates cleanly for large |u|
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(u):
    # 1 - 2 / (exp(2u) + 1): exp overflow to inf gives 1, underflow to 0 gives -1
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def _linear_gelu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, swn, sym,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    y = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    inner = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    out = 0.5 * y * (1.0 + _tanh(inner))
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :], out.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = 16, 32, 32
        _linear_gelu[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
            x2, w, self.linear.bias, y, M, N, K, x2.stride(0), w.stride(0), N,
            BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))
        return y
