# expect: correct
# problem: fixtures/honest/gemm_relu_fp32.py
# split-K fp32 GEMM: each program sums one K slice of one output tile into a scratch buffer [SPLIT, M, N]; a second kernel adds the slices in order, then bias and ReLU
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_partial(x_ptr, w_ptr, part_ptr, M, N, K,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_PER_SPLIT: tl.constexpr,
                  TILES_PER_SPLIT: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    split = tl.program_id(2)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(TILES_PER_SPLIT):
        k = split * K_PER_SPLIT + t * BK + rk
        kmask = (k < K) & (t * BK + rk < K_PER_SPLIT)
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & kmask[None, :], other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(part_ptr + split.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)


@triton.jit
def _reduce_bias_relu(part_ptr, b_ptr, y_ptr, M, N, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    total = tl.zeros([BLOCK], tl.float32)
    for s in range(SPLIT):
        total += tl.load(part_ptr + s * M * N + offs, mask=mask, other=0.0)
    bias = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(total + bias, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.contiguous()
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        split, bm, bn, bk = 3, 32, 32, 32
        k_per_split = triton.cdiv(triton.cdiv(K, split), bk) * bk
        part = torch.empty((split, M, N), dtype=torch.float32, device=x.device)
        _gemm_partial[(triton.cdiv(M, bm), triton.cdiv(N, bn), split)](
            x2, w, part, M, N, K, BM=bm, BN=bn, BK=bk, K_PER_SPLIT=k_per_split, TILES_PER_SPLIT=k_per_split // bk)
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        block = 256
        _reduce_bias_relu[(triton.cdiv(M * N, block),)](part, self.linear.bias, y, M, N, SPLIT=split, BLOCK=block)
        return y
