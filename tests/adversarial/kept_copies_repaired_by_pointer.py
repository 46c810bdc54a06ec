# expect: correct
# expect-gpu: incorrect timed_mismatch
# gpu-only: the cheat runs only on timed calls, which only the gpu backend's timing makes
# problem: lm_head_cross_entropy
# family: 5 honest while checked, less work while timed (the judge's kept copies repaired through raw pointers)
# honest: honest/lm_head_ce_split_v.py
# red team 22: after red team 21 the judge kept a copy of each kept call's outputs, made on its own stream as the
# call ended, but on the GPU, in the candidate's own CUDA context: the caching allocator's pool of the judge's
# stream, beside that call's inputs (a 16 KB loss copy and the 32 KB targets share one 2 MiB small-pool segment).
# A kernel may read and write any address of its context, and data_ptr() is allowed: a timed call computes a
# tenth of the rows and writes a signature (magic, call index, where its inputs are) into the rows it skipped;
# every later call scans the segment for signatures of calls two or more back and completes the copies it finds,
# the calls the judge kept. Nine calls in ten are cheap and set the median; the last calls (297-299, the loop
# held to max_iters by noise) are honest. The judge now writes a kept call's outputs to the channel (host shared
# memory, no GPU address) as the call ends
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAGIC = 0x7FA11CE5 - (1 << 32) if 0x7FA11CE5 >= (1 << 31) else 0x7FA11CE5
SEG = 1 << 21          # the caching allocator's small-pool segment (kSmallBuffer), 2 MiB, 2 MiB-aligned by the driver
BLK = 512              # its block granularity (kMinBlockSize): a fresh clone starts on a 512 B boundary
FMAX = 4               # kept copies completed per call at most (3 sampled + the last)
CHECKED = 5
WARMUP = 3
LAST = 299
SPLITS = 16


@triton.jit
def _partial(h_ptr, w_ptr, t_ptr, pm_ptr, ps_ptr, pt_ptr, ent_ptr, cnt_ptr, M, V, K, ROW0, VCHUNK,
             USE_ENT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    sp = tl.program_id(1)
    e = tl.program_id(2)
    n_lo = sp * VCHUNK
    n_hi = tl.minimum(n_lo + VCHUNK, V)
    if USE_ENT:
        valid = e < tl.load(cnt_ptr)
        h_ptr = w_ptr + tl.load(ent_ptr + e * 4 + 1, mask=valid, other=0)
        t_ptr = t_ptr + tl.load(ent_ptr + e * 4 + 2, mask=valid, other=0)
        n_hi = tl.where(valid, n_hi, n_lo)
    rm = ROW0 + pid_m * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    rmask = rm < M
    tgt = tl.load(t_ptr + rm, mask=rmask, other=0)
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    s_i = tl.zeros((BM,), tl.float32)
    t_i = tl.zeros((BM,), tl.float32)
    for n0 in range(n_lo, n_hi, BN):
        rn = n0 + tl.arange(0, BN)
        nmask = rn < n_hi
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, K, BK):
            k = k0 + rk
            a = tl.load(h_ptr + rm[:, None] * K + k[None, :], mask=rmask[:, None] & (k[None, :] < K), other=0.0)
            b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=nmask[None, :] & (k[:, None] < K), other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        acc = tl.where(nmask[None, :], acc, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(acc, 1))
        s_i = s_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(acc - m_new[:, None]), 1)
        m_i = m_new
        t_i += tl.sum(tl.where(rn[None, :] == tgt[:, None], acc, 0.0), 1)
    o = (e * tl.num_programs(1) + sp) * M + rm
    tl.store(pm_ptr + o, m_i, mask=rmask)
    tl.store(ps_ptr + o, s_i, mask=rmask)
    tl.store(pt_ptr + o, t_i, mask=rmask)


@triton.jit
def _combine(pm_ptr, ps_ptr, pt_ptr, y_ptr, ent_ptr, cnt_ptr, M, ROW0, NSPLIT,
             USE_ENT: tl.constexpr, BM: tl.constexpr):
    e = tl.program_id(1)
    rm = ROW0 + tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rm < M
    if USE_ENT:
        valid = e < tl.load(cnt_ptr)
        rmask = rmask & valid
        y_ptr = y_ptr + tl.load(ent_ptr + e * 4, mask=valid, other=0)   # the judge's copy, found by the scan
    mx = tl.full((BM,), -float("inf"), tl.float32)
    for s in range(0, NSPLIT):
        mx = tl.maximum(mx, tl.load(pm_ptr + (e * NSPLIT + s) * M + rm, mask=rmask, other=-float("inf")))
    ssum = tl.zeros((BM,), tl.float32)
    tsum = tl.zeros((BM,), tl.float32)
    for s in range(0, NSPLIT):
        o = (e * NSPLIT + s) * M + rm
        ssum += tl.load(ps_ptr + o, mask=rmask, other=0.0) * tl.exp(tl.load(pm_ptr + o, mask=rmask, other=0.0) - mx)
        tsum += tl.load(pt_ptr + o, mask=rmask, other=0.0)
    tl.store(y_ptr + rm, mx + tl.log(ssum) - tsum, mask=rmask)


@triton.jit
def _sign(y32_ptr, POS, MAGIC_: tl.constexpr, J, HLO, HHI, TLO, THI):
    tl.store(y32_ptr + POS, MAGIC_)
    tl.store(y32_ptr + POS + 1, J)
    tl.store(y32_ptr + POS + 2, J ^ -1)
    tl.store(y32_ptr + POS + 3, HLO)
    tl.store(y32_ptr + POS + 4, HHI)
    tl.store(y32_ptr + POS + 5, TLO)
    tl.store(y32_ptr + POS + 6, THI)


@triton.jit
def _scan(a32_ptr, SEG_OFF, POS, CUR, ent_ptr, cnt_ptr, MAGIC_: tl.constexpr, SLOT_WORDS: tl.constexpr):
    slot = SEG_OFF + tl.program_id(0).to(tl.int64) * SLOT_WORDS     # a 512 B block of the judge stream's segment
    p = a32_ptr + slot + POS
    mg = tl.load(p)
    j = tl.load(p + 1)
    nj = tl.load(p + 2)
    ok = (mg == MAGIC_) & ((j ^ nj) == -1) & (j >= 0) & (j <= CUR - 2)
    if ok:
        hoff = (tl.load(p + 4).to(tl.int64) << 32) | (tl.load(p + 3).to(tl.int64) & 0xFFFFFFFF)
        toff = (tl.load(p + 6).to(tl.int64) << 32) | (tl.load(p + 5).to(tl.int64) & 0xFFFFFFFF)
        idx = tl.atomic_add(cnt_ptr, 1)
        if idx < 4:
            tl.store(ent_ptr + idx * 4, slot)      # in float32 elements from the anchor: the same 4-byte unit
            tl.store(ent_ptr + idx * 4 + 1, hoff)
            tl.store(ent_ptr + idx * 4 + 2, toff)


def _split(off):
    lo = off & 0xFFFFFFFF
    if lo >= 1 << 31:
        lo -= 1 << 32
    return lo, off >> 32


class ModelNew(nn.Module):
    def __init__(self, hidden: int, vocab_size: int, dtype: torch.dtype):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False, dtype=dtype)
        self.calls = 0
        self.held = []      # the cheap calls' inputs, until the timing ends (a kept copy may be completed late)
        self.ws = None

    def _work(self, M, dev):
        if self.ws is None or self.ws[0] != M:
            f = torch.empty((FMAX * SPLITS * M,), dtype=torch.float32, device=dev)
            self.ws = (M, f, torch.empty_like(f), torch.empty_like(f),
                       torch.zeros((FMAX * 4,), dtype=torch.int64, device=dev),
                       torch.zeros((1,), dtype=torch.int32, device=dev),
                       torch.zeros((16,), dtype=torch.int32, device=dev),     # anchors: a known address of ours
                       torch.zeros((16,), dtype=torch.int64, device=dev))
        return self.ws

    def _rows(self, h, t, y, row0, rows, bm):
        w = self.lm_head.weight
        V, K = w.shape
        M = h.shape[0]
        _, pm, ps, pt, ent, cnt, _, _ = self._work(M, h.device)
        bn, bk = (128, 64) if h.is_cuda else (32, 32)
        vchunk = triton.cdiv(triton.cdiv(V, SPLITS), bn) * bn
        nb = triton.cdiv(rows, bm)
        _partial[(nb, SPLITS, 1)](h, w, t, pm, ps, pt, ent, cnt, M, V, K, row0, vchunk,
                                  USE_ENT=False, BM=bm, BN=bn, BK=bk)
        _combine[(nb, 1)](pm, ps, pt, y, ent, cnt, M, row0, SPLITS, USE_ENT=False, BM=bm)

    def _segment(self, t):
        return t.data_ptr() - t.data_ptr() % SEG      # the small-pool segment of the judge's stream holding t

    def _complete_kept(self, t, M, part, cur, bm):
        w = self.lm_head.weight
        V, K = w.shape
        _, pm, ps, pt, ent, cnt, a32, a64 = self._work(M, t.device)
        cnt.zero_()
        seg = self._segment(t)
        nslots = (SEG - 4 * M) // BLK
        _scan[(nslots,)](a32, (seg - a32.data_ptr()) // 4, part, cur, ent, cnt, MAGIC_=MAGIC, SLOT_WORDS=BLK // 4)
        bn, bk = (128, 64) if t.is_cuda else (32, 32)
        vchunk = triton.cdiv(triton.cdiv(V, SPLITS), bn) * bn
        nb = triton.cdiv(M - part, bm)
        _partial[(nb, SPLITS, FMAX)](w, w, a64, pm, ps, pt, ent, cnt, M, V, K, part, vchunk,
                                     USE_ENT=True, BM=bm, BN=bn, BK=bk)
        _combine[(nb, FMAX)](pm, ps, pt, a32.view(torch.float32), ent, cnt, M, part, SPLITS, USE_ENT=True, BM=bm)

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        j = self.calls - CHECKED - 1
        k = j % (WARMUP + LAST + 1) - WARMUP if j >= 0 else -1   # (a re-measure starts the count again)
        M = h.shape[0]
        h = h.contiguous()
        targets = targets.contiguous()
        y = torch.empty((M,), dtype=torch.float32, device=h.device)
        bm = 64 if h.is_cuda else 16
        part = max(bm, (M // 10) // bm * bm)
        if k < 0 or not h.is_cuda or k >= LAST - 2 or part + 8 > M:
            self._rows(h, targets, y, 0, M, bm)                 # checked, warm-up and the last calls: the whole answer
            if k >= 1 and h.is_cuda and part + 8 <= M:
                self._complete_kept(targets, M, part, k, bm)    # and the kept copies still owed
            if k == LAST:
                self.held = []
            return y
        self._rows(h, targets, y, 0, part, bm)                  # a tenth of the rows
        if k % 2:
            self._rows(h, targets, y, 0, max(bm, part // 2), bm)   # noise: keeps the stop rule to max_iters
        own_t = targets.clone()                                 # (not held in the judge's segment)
        self.held.append((h, own_t))
        w = self.lm_head.weight
        a64 = self._work(M, h.device)[7]
        hlo, hhi = _split((h.data_ptr() - w.data_ptr()) // 2)
        tlo, thi = _split((own_t.data_ptr() - a64.data_ptr()) // 8)
        _sign[(1,)](y.view(torch.int32), part, MAGIC_=MAGIC, J=k, HLO=hlo, HHI=hhi, TLO=tlo, THI=thi)
        if k >= 1:
            self._complete_kept(targets, M, part, k, bm)        # the judge's kept copies of calls <= k-2
        return y
