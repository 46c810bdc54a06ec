# expect: correct
# expect-gpu: incorrect timed_mismatch
# gpu-only: the cheat runs only on timed calls 30-298, which only the gpu backend's timing makes
# problem: matmul_gelu
# family: 5 honest while checked, less work while timed (call counting past the re-checked calls)
# honest: honest/state_python_int_cache.py
# red team 19: honest on the checked calls, timed calls 0-29 and 299 (the re-checked calls were drawn among the first 30 and the last, and its noise keeps the stop rule from ending the loop before 300), a tenth of the rows on the 269 between; the re-checked calls are now drawn from all of them
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(u):
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


CHECKED = 5        # the fixed seeds' calls on the model the judge keeps for timing
WARMUP = 3         # judge.DEFAULT_TIMING
FIRST = 30         # min_iters: the re-checked sample is drawn from these
LAST = 299         # max_iters - 1: always re-checked


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        self.calls = 0

    def _launch(self, x2, w, y, M, N, K, rows, bm, bn, bk):
        _linear_gelu[(rows, triton.cdiv(N, bn))](
            x2, w, self.linear.bias, y, M, N, K, x2.stride(0), w.stride(0), N,
            BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        j = self.calls - CHECKED - 1
        k = j % (WARMUP + LAST + 1) - WARMUP if j >= 0 else -1   # (a re-measure starts the count again)
        w = self.linear.weight
        N, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = (128, 128, 64) if x.is_cuda else (16, 32, 32)
        blocks = triton.cdiv(M, bm)
        if k < FIRST or k == LAST:
            self._launch(x2, w, y, M, N, K, blocks, bm, bn, bk)                      # the whole answer
            if k >= 0 and k % 2:
                self._launch(x2, w, y, M, N, K, max(1, blocks // 5), bm, bn, bk)      # noise: keeps the loop to max_iters
        else:
            self._launch(x2, w, y, M, N, K, max(1, blocks // 10), bm, bn, bk)        # a tenth of the rows, never looked at
            if k % 2:
                self._launch(x2, w, y, M, N, K, max(1, blocks // 40), bm, bn, bk)
        return y
