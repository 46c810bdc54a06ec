# expect: correct
# expect-gpu: incorrect timed_mismatch
# gpu-only: the cheat runs only on timed calls, which only the gpu backend's timing makes
# problem: matmul_gelu
# family: 5 honest while checked, less work while timed (call counting past the re-checked calls)
# honest: honest/state_python_int_cache.py
# red team 21: keeps every timed call's input and output, computes a tenth of the rows a call and writes the
# rest of the last ten calls' outputs on every tenth call (and the last, 299: its noise keeps the stop rule from
# ending the loop sooner), so nine calls in ten are cheap and set the median, and every output the judge held
# read whole by the time it was written out: 0.26x its honest time on one H100, never caught. The judge now writes
# a kept call's outputs to the channel as the call ends
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(u):
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def _linear_gelu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, swn, sym, ROW0,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = (ROW0 + tl.program_id(0)) * BM + tl.arange(0, BM)
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
LAST = 299         # max_iters - 1


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)
        self.calls = 0
        self.owed = []     # (input, output) of the timed calls whose rows past the first tenth are not written yet

    def _launch(self, x2, y, row0, rows, bm, bn, bk):
        w = self.linear.weight
        N, K = w.shape
        M = x2.shape[0]
        _linear_gelu[(rows, triton.cdiv(N, bn))](
            x2, w, self.linear.bias, y, M, N, K, x2.stride(0), w.stride(0), N, row0,
            BM=bm, BN=bn, BK=bk, K_TILES=triton.cdiv(K, bk))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        j = self.calls - CHECKED - 1
        k = j % (WARMUP + LAST + 1) - WARMUP if j >= 0 else -1   # (a re-measure starts the count again)
        N, K = self.linear.weight.shape
        x2 = x.contiguous().view(-1, K)
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        bm, bn, bk = (128, 128, 64) if x.is_cuda else (16, 32, 32)
        blocks = triton.cdiv(x2.shape[0], bm)
        if k < 0:
            self._launch(x2, y, 0, blocks, bm, bn, bk)                         # checked and warm-up: the whole answer
            return y
        part = max(1, blocks // 10)
        self._launch(x2, y, 0, part, bm, bn, bk)                               # a tenth of the rows now
        self.owed.append((x2, y.view(-1, N)))
        if k % 10 == 9 or k == LAST:                                           # the rest of the last ten, off the median
            for xo, yo in self.owed:
                if blocks > part:
                    self._launch(xo, yo, part, blocks - part, bm, bn, bk)
            self.owed = []
        elif k % 2:
            self._launch(x2, y, 0, max(1, blocks // 40), bm, bn, bk)          # noise: keeps the loop to max_iters
        return y
