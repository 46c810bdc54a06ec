"""The megakernel's CUDA text around the task bodies: the prelude (types, bf16, reductions, the
counters' waits and signals), the weight ring, the main loop, prefetch modes, probes and claims.
Python %-format templates, filled in by emit.py.
"""
from __future__ import annotations

import textwrap



# Probes (emit_cuda probes=True, a diagnostic): each task's trace row gets PROBE_WORDS words: the
# %globaltimer at its start (waits over) and finish, as without probes, then the SM's clock64 when the
# queue reaches it, when its waits are over, when its input vector is on chip, when its first
# weight stage is in (attention: its first scores), when its last row is done, and when it has signalled.
PROBE_WORDS = 8
PROBE_NAMES = ("dequeued", "started", "input", "first", "last", "signalled")   # words 2..7
_PROBES = r"""
#if MK_PROBES
#define PROBE_WORDS 8
#define PROBE_INPUT 4
#define PROBE_FIRST 5
#define PROBE_LAST 6
__shared__ unsigned long long* mk_probe;   // the running task's trace row (null: no trace), set by the control warp
#define MK_PROBE(k) do { if (threadIdx.x == 0 && mk_probe) mk_probe[k] = clock64(); } while (0)
#else
#define PROBE_WORDS 2
#define MK_PROBE(k) do { } while (0)
#endif
"""

_THREADS = r"""#define WS_PRODUCER_WARP %(producer_warp)d   // a warp of its own issues the weight ring's copies
// maxnreg: the producer's warp comes with a whole warpgroup (warps 8-11), which gives registers back
// (setmaxnreg.dec, to MK_PRODUCER_REGS) so that the compute warps can take MK_MAXNREG (setmaxnreg.inc)
// where ptxas otherwise caps the kernel at 168 (three warps share each of the SM's four register files).
// Hopper's arch-specific sm_90a only; compiled for another arch the kernel runs with the cap.
#define MK_MAXNREG %(maxnreg)d
#define MK_PRODUCER_REGS %(producer_regs)d
#if MK_MAXNREG && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MK_SETMAXNREG 1
#else
#define MK_SETMAXNREG 0
#endif
#if WS_PRODUCER_WARP   // task bodies run on the block less that warp, and sync on barrier 1 alone
#define MK_NT %(nt)d
#define MK_SYNC() asm volatile("bar.sync 1, %(nt)d;" ::: "memory")
#else
#define MK_NT blockDim.x
#define MK_SYNC() __syncthreads()
#endif
"""

_PRELUDE = r"""// megakernel-gym: one persistent kernel for a whole plan (generated; see compiler/codegen.py)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

__device__ __forceinline__ float bf2f(unsigned short v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);   // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                    // round to nearest even
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mk_silu(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float mk_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float mk_gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// weights: read once per step, so 16 bytes through the non-coherent path without allocating in L1
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float dot_bf16x8(uint4 w, float4 a, float4 b) {
  float s = bf_lo(w.x) * a.x;
  s = fmaf(bf_hi(w.x), a.y, s); s = fmaf(bf_lo(w.y), a.z, s); s = fmaf(bf_hi(w.y), a.w, s);
  s = fmaf(bf_lo(w.z), b.x, s); s = fmaf(bf_hi(w.z), b.y, s); s = fmaf(bf_lo(w.w), b.z, s);
  return fmaf(bf_hi(w.w), b.w, s);
}
// the same sums with x as 8 bf16 values (x_bf16): each converted exactly, in the same order
__device__ __forceinline__ float dot_bf16x8_x(uint4 w, uint4 x) {
  float s = bf_lo(w.x) * bf_lo(x.x);
  s = fmaf(bf_hi(w.x), bf_hi(x.x), s); s = fmaf(bf_lo(w.y), bf_lo(x.y), s); s = fmaf(bf_hi(w.y), bf_hi(x.y), s);
  s = fmaf(bf_lo(w.z), bf_lo(x.z), s); s = fmaf(bf_hi(w.z), bf_hi(x.z), s); s = fmaf(bf_lo(w.w), bf_lo(x.w), s);
  return fmaf(bf_hi(w.w), bf_hi(x.w), s);
}
__device__ __forceinline__ float dot_f32x4(uint4 w, float4 a) {
  return __uint_as_float(w.x) * a.x + __uint_as_float(w.y) * a.y + __uint_as_float(w.z) * a.z
         + __uint_as_float(w.w) * a.w;
}
__device__ __forceinline__ void unpack_bf16x8(uint4 w, float* f) {
  f[0] = bf_lo(w.x); f[1] = bf_hi(w.x); f[2] = bf_lo(w.y); f[3] = bf_hi(w.y);
  f[4] = bf_lo(w.z); f[5] = bf_hi(w.z); f[6] = bf_lo(w.w); f[7] = bf_hi(w.w);
}
__device__ __forceinline__ void unpack_f32x4(uint4 w, float* f) {
  f[0] = __uint_as_float(w.x); f[1] = __uint_as_float(w.y); f[2] = __uint_as_float(w.z); f[3] = __uint_as_float(w.w);
}
// a task's weight tile into L2 ahead of its turn (sm_90 bulk prefetch; 16-byte aligned, multiple of 16)
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
// where element e of rows of k floats (k % 8 == 0) sits in the two-plane layout of batched x (_x_split):
// each group of 8 split into its first 4, in the row's first half, and its last 4, in the second
__device__ __forceinline__ int mk_xp(int e, int k) {
  const int r = e / k, c = e - r * k;
  return r * k + ((c & 4) ? (k >> 1) : 0) + ((c >> 3) << 2) + (c & 3);
}
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  MK_SYNC();
  float t = 0.f;
  for (int w = 0; w < (int)(MK_NT / 32); ++w) t += red[w];
  MK_SYNC();
  return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// LL words (hops.py; NCCL's LL protocol, with the flag beside the data): a bf16 activation element
// as one 4-byte word, the value in the low half and the launch's epoch in the high half (float32: 8
// bytes, a word each), written by one store, so a reader that sees this launch's epoch sees the
// value: no fence, no counter, no second trip. mk_ep: this launch's epoch (1-65535, never 0: a
// zeroed word is no launch's).
#define MK_LL_SLEEP 32   // ns between polls of a word not there yet: every thread of a block may poll
__shared__ unsigned mk_ep;
__shared__ unsigned long long mk_spins;   // polls before a word that never comes traps the kernel
__device__ __forceinline__ void ll_st(unsigned* p, unsigned short v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"((mk_ep << 16) | v) : "memory");
}
// a float32 element: 8 bytes, the value in the low word and the epoch in the high one
__device__ __forceinline__ void ll_st(unsigned long long* p, float v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;"
               :: "l"(p), "l"(((unsigned long long)mk_ep << 32) | __float_as_uint(v)) : "memory");
}
__device__ __forceinline__ unsigned long long ll_ld1(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ ulonglong2 ll_ld2(const ulonglong2* p) {
  ulonglong2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned ll_ld1(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ll_ld4(const uint4* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float ll_bf(const unsigned* p) {
  unsigned w = ll_ld1(p);
  for (unsigned long long tries = 0; (w >> 16) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float(w << 16);
}
// a float32 LL word already loaded once (w): polled again until this launch's is there, so that a
// thread can issue many loads together and wait on each only where it was early
__device__ __forceinline__ float ll_f32_from(const unsigned long long* p, unsigned long long w) {
  for (unsigned long long tries = 0; (unsigned)(w >> 32) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float((unsigned)w);
}
__device__ __forceinline__ float ll_f32(const unsigned long long* p) { return ll_f32_from(p, ll_ld1(p)); }
__device__ __forceinline__ bool ll_ok2(ulonglong2 w) { return (unsigned)(w.x >> 32) == mk_ep && (unsigned)(w.y >> 32) == mk_ep; }
__device__ __forceinline__ bool ll_ok4(uint4 w) {
  return (w.x >> 16) == mk_ep && (w.y >> 16) == mk_ep && (w.z >> 16) == mk_ep && (w.w >> 16) == mk_ep;
}"""

_NO_RING = """
#define WS_REFILL do { } while (0)
#define WS_STAGES 0
#define WS_STAGE 0
#define WS_SEGS 0
#define WS_SEG_BYTES 16
#define MK_OPEN() do { } while (0)
extern __shared__ float4 mk_smem[];
"""

_RING_INIT = r"""  {   // the weight ring: the queue's segments into shared memory, the barriers, the first stages
    WsSeg* seg = (WsSeg*)((char*)mk_smem + WS_STAGES * WS_STAGE);
    const int f0 = ws_start[q], nseg = ws_start[q + 1] - f0;
    for (int f = threadIdx.x; f < nseg; f += blockDim.x)
#if WS_CLAIMS   // a claimed call's rows word: rows | (pool + 1) << 16 | group segments << 24
      seg[f] = WsSeg{(const char*)T_global[ws_slot[f0 + f]] + ws_offset[f0 + f], ws_rows[f0 + f] & 0xffff, ws_rowb[f0 + f],
                     ((ws_rows[f0 + f] >> 16) & 0xff) - 1, ws_rows[f0 + f] >> 24};
    for (int p = threadIdx.x; p < WS_CLAIMS; p += blockDim.x) ws_pool_ctr[p] = (unsigned*)T_global[ws_pool_slot[p]];
#else
      seg[f] = WsSeg{(const char*)T_global[ws_slot[f0 + f]] + ws_offset[f0 + f], ws_rows[f0 + f], ws_rowb[f0 + f]};
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int b = 0; b < WS_STAGES; ++b) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&ws_bar[b])) : "memory");
#if WS_PRODUCER_WARP   // a stage's buffer is free again once every compute warp has released it
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&ws_empty[b])), "r"(MK_NT / 32) : "memory");
#endif
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      ws.seg = seg; ws.f = 0; ws.f_end = nseg; ws.s = 0; ws.issued = 0; ws.done = 0;
      ws.pf_f = 0; ws.pf_s = 0; ws.pf = 0; ws.held = 0; ws.nheld = 0;
#if WS_AHEAD
      ws_open = 0; ws_opens = 0;
#endif
#if !WS_PRODUCER_WARP
      ws_pump(WS_STAGES);
#endif
    }
    __syncthreads();
  }"""

_RING = r"""
// The weight ring. A block's streamed matmul calls, in queue order, make one stream of stages
// (WS_SEG bytes of one weight row per warp); a producer warp (WS_PRODUCER_WARP) or thread 0 keeps
// WS_STAGES of them in flight as bulk copies into shared memory, each completing on its stage's
// mbarrier (full), freed by every compute warp's arrival (empty) or the block's barrier. Weights do not depend on
// the step's data, so the stream runs ahead of the counters: a task's first stages are issued as
// soon as the task before it frees a buffer, and land while it waits for its inputs.
#define WS_STAGES %(ws_stages)d
#define WS_SEG %(ws_seg)d
#define WS_STAGE %(ws_stage)d
#define WS_SEGS %(ws_segs)d          // the most ring-fed calls any queue has (16 bytes each)
#define WS_L2_AHEAD %(l2_ahead)d      // stages past the ring prefetched to L2, always
#define WS_L2_WAIT %(l2_wait)d        // stages past the ring prefetched to L2 when a task must wait
#define WS_HOLD %(hold)d              // producer warp: a call's last stages held until the task has signalled
#define WS_INFLIGHT %(inflight)d        // producer warp: the most stages issued and not landed (emit_cuda inflight)
#define WS_INFLIGHT_OPS %(inflight_ops)d    // a call's rows word carries its caps in bits 16-23 (emit_cuda inflight_ops, the IR's edits)
#define WS_ROWS_MASK (WS_INFLIGHT_OPS ? 0xffff : 0xffffff)
#define WS_EVICT_FIRST %(evict_first)d      // the ring's bulk copies leave their lines first in line for eviction from L2 (emit_cuda ring_l2)
#define WS_L2_IDLE %(l2_idle)d          // producer warp: a call's rows word carries stages it sends to L2 while the ring idles (emit_cuda l2_idle)
#define WS_AHEAD %(ahead_on)d            // producer warp: stages of a task not yet past its waits have caps of their own
#define WS_AHEAD_CAP %(ahead)d        // ... at most this many in flight (emit_cuda inflight_ahead; 0: none), or the call's (`ahead` edit)
#if WS_AHEAD
__shared__ volatile unsigned ws_open;   // the stream's segment where the opened tasks end: one before it is on chip's
__shared__ unsigned ws_opens;           // the running task's end, stored there once its input vector is staged (MK_OPEN) or at its end
#define MK_OPEN() do { if (threadIdx.x == 32 * MK_CONTROL_WARP && ws_opens) { ws_open = ws_opens; ws_opens = 0; } } while (0)
#else
#define MK_OPEN() do { } while (0)
#endif
// after a task's signal, thread 0 refills the buffer its last ring stage freed (the stage loop leaves
// it: a bulk copy in flight made the control warp's fence wait for it, about 0.5-1 us a task; with
// control_warp 0, the same thread signalled just before)
#if WS_PRODUCER_WARP   // the producer warp refills a buffer once it is released: the held one, now
#define WS_REFILL do { if (threadIdx.x == 0) ws_unhold(); } while (0)
#else
#define WS_REFILL do { if (threadIdx.x == 0) ws_pump(ws.done + WS_STAGES); } while (0)
#endif
#if WS_CLAIMS
// a claimed op's call (emit_cuda claim): `claim` its tile pool (-1: none), `grp` the group's
// segments (on its first), src the first tile's rows: the producer takes a tile from the pool
// as it reaches the group, streams that tile's rows, and again, until the pool is empty
struct WsSeg { const char* src; int rows, rowb, claim, grp; };
__shared__ int ws_tile[WS_STAGES];                  // per stage: the tile it starts (-1: the pool was empty)
__shared__ unsigned* ws_pool_ctr[WS_CLAIMS];        // per pool: its claim count in memory (only grows)
#else
struct WsSeg { const char* src; int rows, rowb; };   // one ring-fed call: its first weight row, rows, row bytes
#endif
#define WS_SEG_BYTES ((int)sizeof(WsSeg))   // 16, or 24 with claims (codegen's table layout counts the same)
struct WsStream {
  const WsSeg* seg;           // the queue's segments, copied into shared memory at launch
  int f, f_end, s;            // producer: the segment it copies from, the end, the stage within it
  unsigned issued, done;      // stages issued / consumed by this block since the launch
  int pf_f, pf_s; unsigned pf; // the L2 lookahead's cursor (segment, stage within it) and stages sent to L2
  unsigned held, nheld;       // producer warp: a call's last stages, released by thread 0 later (nheld 0: none)
};
__shared__ WsStream ws;
__shared__ __align__(8) unsigned long long ws_bar[WS_STAGES];     // full: the stage's bytes have landed
#if WS_PRODUCER_WARP
__shared__ __align__(8) unsigned long long ws_empty[WS_STAGES];   // empty: every compute warp is done with it
#endif
extern __shared__ float4 mk_smem[];
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ char* ws_stage(unsigned g) { return (char*)mk_smem + (g %% WS_STAGES) * WS_STAGE; }
// thread 0: issue stages until `upto` are issued (or the queue's stream ends). It reads only shared
// memory: warp 0 runs this between two stages of a task, and the other warps wait at the next barrier.
// stage s of segment f: its first row's bytes, rows (one per warp), bytes per row (one WS_SEG piece
// of each), and whether it is whole rows; then the cursor (f, s) moves to the next stage
// (packed rows, codegen.ring_packed: whole rows of 1, 2, 4 or 8 segments, the stage one contiguous
// WS_STAGE bytes of them, so that warp w always gets segment w %% segments of its row)
struct WsAt { const char* src; int nr, seg, rowb; bool whole, packed; };
__device__ __forceinline__ WsAt ws_at(int& f, int& s) {
  WsSeg sg = ws.seg[f];
  sg.rows &= WS_ROWS_MASK;   // (the bytes above: the call's own in-flight cap, its l2_idle stages)
  const int ncs = (sg.rowb + WS_SEG - 1) / WS_SEG;
  if (sg.rowb %% WS_SEG == 0 && %(warps)d %% ncs == 0) {
    const int rps = %(warps)d / ncs;
    const WsAt a{sg.src + (long long)s * rps * sg.rowb, min(rps, sg.rows - s * rps), sg.rowb, sg.rowb, true, true};
    if (++s == (sg.rows + rps - 1) / rps) { s = 0; ++f; }
    return a;
  }
  const int rg = s / ncs, cs = s - rg * ncs;
  const WsAt a{sg.src + (long long)rg * %(warps)d * sg.rowb + (long long)cs * WS_SEG, min(%(warps)d, sg.rows - rg * %(warps)d),
               min(WS_SEG, sg.rowb - cs * WS_SEG), sg.rowb, ncs == 1, false};
  if (++s == (sg.rows + %(warps)d - 1) / %(warps)d * ncs) { s = 0; ++f; }
  return a;
}
// one bulk copy of n bytes from global src to shared dst, completing on barrier bar; with
// WS_EVICT_FIRST under the L2 policy pol (weights are read once a step: their L2 lines go before
// the KV slices, LL words and counters)
#if WS_EVICT_FIRST
#define WS_BULK(dst, src, n, bar, pol) \
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%%0], [%%1], %%2, [%%3], %%4;" \
               :: "r"(dst), "l"(src), "r"(n), "r"(bar), "l"(pol) : "memory")
#else
#define WS_BULK(dst, src, n, bar, pol) \
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%0], [%%1], %%2, [%%3];" \
               :: "r"(dst), "l"(src), "r"(n), "r"(bar) : "memory")
#endif
// stage g's bulk copies, completing on its full barrier
__device__ __forceinline__ void ws_copy(const WsAt& a, unsigned g) {
  const unsigned bar = smem_addr(&ws_bar[g %% WS_STAGES]);
  const unsigned dst = smem_addr(ws_stage(g));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;" :: "r"(bar), "r"(a.nr * a.seg) : "memory");
  unsigned long long pol = 0;
#if WS_EVICT_FIRST
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %%0, 1.0;" : "=l"(pol));
#endif
  (void)pol;
  if (a.packed)   // one copy of the stage's whole rows
    WS_BULK(dst, a.src, a.nr * a.seg, bar, pol);
  else for (int r = 0; r < a.nr; ++r)
    WS_BULK(dst + r * WS_SEG, a.src + (long long)r * a.rowb, a.seg, bar, pol);
}
__device__ void ws_l2(unsigned upto);
__device__ void ws_pump(unsigned upto) {
  if (ws.issued < upto && ws.f < ws.f_end)   // the buffers were last read through the generic proxy
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  while (ws.issued < upto && ws.f < ws.f_end) {
    ws_copy(ws_at(ws.f, ws.s), ws.issued);
    ++ws.issued;
  }
#if WS_L2_AHEAD > 0
  ws_l2(upto + WS_L2_AHEAD);
#endif
}
// thread 0: the stream's stages up to `upto` that are past the ring go to L2 (cp.async.bulk.prefetch.L2),
// so that a wait longer than the ring's depth still keeps this SM's share of the memory pipe busy
// (`piece`: bytes per prefetch of whole rows, all of them at once by default; ws_idle_l2 sends 4 KB
// pieces, since one prefetch of a whole 32 KB stage measured slower than those: bench/results/
// l2_probe.json, 64 KB past a 5-stage ring, 8 us of waiting, then the run)
__device__ __forceinline__ void ws_stage_l2(const WsAt& a, int piece = 1 << 30) {
  if (a.whole)   // whole rows: the stage is one contiguous run of nr rows
    for (int c = 0; c < a.nr * a.rowb; c += piece) prefetch_l2(a.src + c, (unsigned)min(piece, a.nr * a.rowb - c));
  else
    for (int r = 0; r < a.nr; ++r) prefetch_l2(a.src + (long long)r * a.rowb, (unsigned)a.seg);
}
__device__ void ws_l2(unsigned upto) {
  if (ws.pf < ws.issued) { ws.pf = ws.issued; ws.pf_f = ws.f; ws.pf_s = ws.s; }
  while (ws.pf < upto && ws.pf_f < ws.f_end) {
    ws_stage_l2(ws_at(ws.pf_f, ws.pf_s));
    ++ws.pf;
  }
}
// until the barrier's phase of this parity has completed (one that never does is a bug: trap)
__device__ __forceinline__ void ws_wait_bar(unsigned bar, unsigned parity) {
  for (unsigned long long tries = 0;; ++tries) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%%1], %%2; selp.u32 %%0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    if (ok) return;
    if (tries > (1ull << 26)) __trap();
  }
}
// every thread: until stage g is in shared memory
__device__ __forceinline__ void ws_wait(unsigned g) {
  ws_wait_bar(smem_addr(&ws_bar[g %% WS_STAGES]), (g / WS_STAGES) & 1u);
}
#if WS_PRODUCER_WARP
// a compute warp done reading stage g (every lane's loads of it are in registers): one arrival
__device__ __forceinline__ void ws_release(unsigned g) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0];" :: "r"(smem_addr(&ws_empty[g %% WS_STAGES])) : "memory");
}
// thread 0: the stage a ring call held back is released for all compute warps (they are past it)
__device__ __forceinline__ void ws_unhold() {
  for (unsigned h = 0; h < ws.nheld; ++h)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0], %%1;"
                 :: "r"(smem_addr(&ws_empty[(ws.held + h) %% WS_STAGES])), "r"(MK_NT / 32) : "memory");
  ws.nheld = 0;
}
#if WS_L2_IDLE
__device__ __forceinline__ bool ws_test_bar(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%%1], %%2; selp.u32 %%0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok;
}
// the producer, about to refill a buffer for stage g of the call at (f, s), whose rows word asks for
// n stages to L2 while the ring idles, the buffer's last stage also of such a call (so the ring is
// full of the waiting task's own weights, not of the task's before: a task waiting on its inputs
// while the attention half's chain runs is left alone, since extra reads there slow that chain):
// until the buffer is free, if the newest stage in flight lands first (the ring is full and landed,
// its oldest stage unreleased: the task is staging its inputs, and nothing of this SM's is in the
// memory pipe), stages g .. g + n - 1 (those not sent yet, li) go to L2, so that the bulk copies
// that later fill the ring with them hit it
__device__ void ws_idle_l2(int f, int s, unsigned g, unsigned& li) {
  const unsigned n = (unsigned)ws.seg[f].rows >> 24;
  const unsigned eb = smem_addr(&ws_empty[g %% WS_STAGES]), ep = (g / WS_STAGES - 1) & 1u;
  const unsigned fb = smem_addr(&ws_bar[(g - 1) %% WS_STAGES]), fp = ((g - 1) / WS_STAGES) & 1u;
  for (;;) {
    if (ws_test_bar(eb, ep)) return;   // a buffer came free: the ring moves on
    if (ws_test_bar(fb, fp)) break;    // landed and not released: the task waits
  }
  unsigned k = g;
  for (; k < g + n && f < ws.f_end; ++k) {
    const WsAt a = ws_at(f, s);
    if (k >= li) ws_stage_l2(a, 4096);
  }
  li = k;
}
#endif
// the producer warp's first lane: the queue's whole stream of stages, each as soon as its buffer is
// free (every compute warp released the stage WS_STAGES before it), never in a compute warp's way
// With WS_L2_AHEAD, the WS_L2_AHEAD stages past the ring's are sent to L2 before it waits for a
// buffer, so while the ring is full (its tasks wait for their inputs) the memory pipe still works.
__device__ void ws_produce() {
  int f = 0, s = 0;
#if WS_INFLIGHT_OPS || WS_AHEAD
  unsigned landed = 0;   // every stage before it has landed (the per-op caps' waits)
#endif
#if WS_CLAIMS
  int k = -1, g0 = 0, g1 = 0;   // the tile a claim group streams (-1: none yet), the group's first segment and its end
  unsigned ahead = 0;           // a claim in flight for the group at f (taken as the stage before it went out)
  bool have = false;
#endif
#if WS_L2_AHEAD > 0
  int lf = 0, ls = 0;
  unsigned lg = 0;   // the L2 lookahead's cursor: stages it has passed (those the ring will hold it skips)
#endif
#if WS_L2_IDLE
  unsigned li = 0;            // stages of the stream sent to L2 while the ring idled (ws_idle_l2)
  int ring_f[WS_STAGES];      // the segment each buffer's stage came from
#endif
  for (unsigned g = 0; f < ws.f_end; ++g) {
#if WS_L2_AHEAD > 0
    for (; lg < g + WS_STAGES + WS_L2_AHEAD && lf < ws.f_end; ++lg) {
      const WsAt a = ws_at(lf, ls);
      if (lg >= g + WS_STAGES) ws_stage_l2(a);
    }
#endif
#if WS_CLAIMS
    // a claimed op's call: the pool's next tile. Its claim goes out before the wait for a buffer
    // (here, or as the stage before went out), so its round trip overlaps that wait
    if (k < 0 && !have && ws.seg[f].claim >= 0) { ahead = atomicAdd(ws_pool_ctr[ws.seg[f].claim], 1u); have = true; }
#endif
#if WS_L2_IDLE
    if (g >= WS_STAGES && (ws.seg[f].rows >> 24) && (ws.seg[ring_f[g %% WS_STAGES]].rows >> 24)
        && li < g + ((unsigned)ws.seg[f].rows >> 24)) ws_idle_l2(f, s, g, li);
    ring_f[g %% WS_STAGES] = f;
#endif
    if (g >= WS_STAGES) ws_wait_bar(smem_addr(&ws_empty[g %% WS_STAGES]), (g / WS_STAGES - 1) & 1u);
#if WS_INFLIGHT_OPS || WS_AHEAD   // the call's own cap (0: WS_INFLIGHT): every stage from g - cap back has landed
    {
      // with per-op caps the rows word's bits 16-20 hold the call's cap, 21-23 its cap while its task waits
      const int rw = WS_INFLIGHT_OPS ? ws.seg[f].rows : 0;
      const int own = (rw >> 16) & 0x1f;
      int cap = own ? own : WS_INFLIGHT;
#if WS_AHEAD   // a stage of a task still waiting for its inputs (or further on): its own cap for that, else WS_AHEAD_CAP
      const int own_ahead = (rw >> 21) & 7, ahead = own_ahead ? own_ahead : WS_AHEAD_CAP;
      // (ws_open, which the control warp moves, is read only for a call that has such a cap)
      if (ahead && (unsigned)f >= ws_open) cap = ahead;   // below its cap once running (fewer copies in the chain's way) or above it
#endif
      // each stage is waited for once, oldest first (`landed`: every stage before it has landed), so a
      // cap below the ring costs one barrier wait a stage, as the single cap's does, not one per stage
      // between the cap and the ring's depth (H200, megakernel_edits_inflight_cost.json); a stage
      // WS_STAGES back was released, so it had landed
      if (landed + WS_STAGES <= g) landed = g + 1 - WS_STAGES;
      for (; landed + cap <= g; ++landed) ws_wait_bar(smem_addr(&ws_bar[landed %% WS_STAGES]), (landed / WS_STAGES) & 1u);
    }
#elif WS_INFLIGHT < WS_STAGES
    if (g >= WS_INFLIGHT) ws_wait_bar(smem_addr(&ws_bar[(g - WS_INFLIGHT) %% WS_STAGES]), ((g - WS_INFLIGHT) / WS_STAGES) & 1u);
#endif
#if WS_CLAIMS
    if (k < 0 && ws.seg[f].claim >= 0) {
      const int p = ws.seg[f].claim;
      const unsigned v = ahead %% (unsigned)ws_pool_claims[p];
      have = false;
      if (v >= (unsigned)ws_pool_tiles[p]) {   // none left: a stage of no bytes says so, and the group ends
        ws_tile[g %% WS_STAGES] = -1;
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0];" :: "r"(smem_addr(&ws_bar[g %% WS_STAGES])) : "memory");
        f += ws.seg[f].grp;
        continue;
      }
      k = (int)v; g0 = f; g1 = f + ws.seg[f].grp;
      ws_tile[g %% WS_STAGES] = k;   // seen by the compute warps after this stage's full barrier
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const long long shift = k >= 0 ? (long long)k * ws.seg[f].rows * ws.seg[f].rowb : 0;
    WsAt a = ws_at(f, s);
    a.src += shift;
    ws_copy(a, g);
    if (k >= 0 && f == g1) { f = g0; k = -1; }   // the tile's rows are all issued: take another
    if (k < 0 && !have && f < ws.f_end && ws.seg[f].claim >= 0) { ahead = atomicAdd(ws_pool_ctr[ws.seg[f].claim], 1u); have = true; }
#else
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the buffer was read through the generic proxy
    ws_copy(ws_at(f, s), g);
#endif
  }
}
#endif
"""

_MAIN = r"""
// One block per SM queue. Its tasks come as one stream of int words (emit_cuda's q_stream), copied
// into shared memory at launch with the pointer table T and the slot lists, so that nothing a task
// needs before its data (which task, what to wait for, which calls, what to signal) is a trip to
// memory: with the L2 cold, as it is at every decode step, each such trip costs about a microsecond.
// Per task: t, waits, calls, signals, prefetches; then (counter, target) per wait, (function, lo,
// hi, part, first slot) per call, a counter per signal, (slot, byte lo, byte hi, bytes) per prefetch.
// status: [0] 0 = ran, 1 = a wait ran out of spins; [1] task; [2] counter.
// Before each task's waits, warp 0 issues the L2 prefetches scheduled at this queue position
// (weight tiles of this or later tasks, as the schedule's prefetch depth says), so weights stream
// while the task waits for its inputs.
// (one block per SM: __launch_bounds__ min 1 lets ptxas use all of its registers, which the ring's
// x in registers needs without spilling)
extern "C" __global__ void __launch_bounds__(%(threads)d, 1) megakernel(
    void* const* T_global, const int* __restrict__ slot_args_global, const int* __restrict__ q_stream,
    const int* __restrict__ qs_start, const int* __restrict__ ws_start,
    const int* __restrict__ ws_slot, const long long* __restrict__ ws_offset, const int* __restrict__ ws_rows,
    const int* __restrict__ ws_rowb, unsigned* counters,
    unsigned long long spin_budget, int* status, unsigned long long* trace, unsigned epoch) {
  if (threadIdx.x == 0) { mk_ep = epoch; mk_spins = spin_budget; }   // seen after the barrier below
  char* lay = (char*)mk_smem + WS_STAGES * WS_STAGE + WS_SEGS * WS_SEG_BYTES;   // past the weight ring
  void** T = (void**)lay;
  int* slot_args = (int*)(lay + %(n_slots)d * 8);
  const int q = blockIdx.x, qn = qs_start[q + 1] - qs_start[q];
  const int* QS = QS_SMEM ? slot_args + %(n_args)d : q_stream + qs_start[q];
  float* sm = (float*)(lay + %(tab_bytes)d);                         // op scratch, past the tables
  for (int k = threadIdx.x; k < %(n_slots)d; k += blockDim.x) T[k] = T_global[k];
  for (int k = threadIdx.x; k < %(n_args)d; k += blockDim.x) slot_args[k] = slot_args_global[k];
  if (QS_SMEM)
    for (int k = threadIdx.x; k < qn; k += blockDim.x) ((int*)QS)[k] = q_stream[qs_start[q] + k];
  __syncthreads();
%(ring_init)s
#if WS_PRODUCER_WARP
  if (threadIdx.x >= MK_NT) {   // the producer warp: the weight ring's copies, nothing else
#if MK_SETMAXNREG   // its whole warpgroup gives its registers back, then all but one thread leave
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %%0;" :: "n"(MK_PRODUCER_REGS));
#endif
    if (threadIdx.x == MK_NT) ws_produce();
    return;
  }
#if MK_SETMAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %%0;" :: "n"(MK_MAXNREG));
#endif
#endif
  for (int p = 0; p < qn;) {
    const int t = QS[p], nw = QS[p + 1], nc = QS[p + 2] & MK_CALLS_MASK, ns = QS[p + 3], npf = QS[p + 4];
#if WS_AHEAD
    const unsigned opens = (unsigned)QS[p + 2] >> 16;   // where this task's ring segments end, if it has capped ones (else 0)
#endif
    const int* W = QS + p + 5;
    const int* C = W + 2 * nw;
    const int* G = C + 5 * nc;
    const int* F = G + ns;
    p += 5 + 2 * nw + 5 * nc + ns + 4 * npf;
#if MK_PROBES
    if (threadIdx.x == 32 * MK_CONTROL_WARP) {   // the next task's row (thread 0, which writes the body's probes, sees it after the waits)
      mk_probe = trace ? trace + PROBE_WORDS * t : nullptr;
      if (mk_probe) mk_probe[2] = clock64();
    }
#endif
%(prewait)s
%(prefetch)s
%(l2_wait)s
    if (threadIdx.x / 32 == MK_CONTROL_WARP) {   // its 32 lanes poll the task's counters side by side
      for (int w = threadIdx.x %% 32; w < nw; w += 32) {
        unsigned long long spins = 0;
        while (ld_acquire(&counters[W[2 * w]]) < (unsigned)W[2 * w + 1]) {
          if (++spins > spin_budget) {
            status[1] = t; status[2] = W[2 * w];
            __threadfence_system();
            atomicExch(&status[0], 1);
            __trap();
          }
          __nanosleep(32);
        }
      }
      __syncwarp();
#if WS_AHEAD   // its counters are full: its stages go at their own caps once its input is staged (LL polls) too
      if (opens && threadIdx.x == 32 * MK_CONTROL_WARP) ws_opens = opens;
#endif
      if (trace && threadIdx.x == 32 * MK_CONTROL_WARP) {
        unsigned long long g; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g)); trace[PROBE_WORDS * t] = g;
#if MK_PROBES
        mk_probe[3] = clock64();
#endif
      }
    }
    MK_SYNC();
    for (int c = 0; c < nc; ++c) {
      const int* cc = C + 5 * c;
%(claim_loop)s
      switch (cc[0]) {
%(cases)s
      }
      MK_SYNC();
    }
#if WS_AHEAD
    if (opens) MK_OPEN();   // (a task whose calls staged no input vector)
#endif
    if (threadIdx.x == 32 * MK_CONTROL_WARP) {   // the block's writes are ordered by the barrier above, published by this release
#if MK_SIGNAL_RELEASE   // each counter's add a release of its own
      for (int k = 0; k < ns; ++k)
        asm volatile("red.release.gpu.global.add.u32 [%%0], 1;" :: "l"(&counters[G[k]]) : "memory");
#else
      if (ns > 0) asm volatile("fence.acq_rel.gpu;" ::: "memory");   // none: its readers poll LL words
      for (int k = 0; k < ns; ++k)
        asm volatile("red.relaxed.gpu.global.add.u32 [%%0], 1;" :: "l"(&counters[G[k]]) : "memory");
#endif
      if (trace) { unsigned long long g; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g)); trace[PROBE_WORDS * t + 1] = g; }
#if MK_PROBES
      if (mk_probe) mk_probe[7] = clock64();
#endif
    }
    WS_REFILL;
  }
}
"""


# warp 0 issues one bulk L2 prefetch per 32 KB (sm_90's cp.async.bulk.prefetch.L2) for the weight
# tiles scheduled at this queue position (F: slot, first byte low and high words, bytes)
_BULK_LOOP = """for (int f = 0; f < npf; ++f) {
  const char* base = (const char*)T[F[4 * f]] + (long long)(((unsigned long long)(unsigned)F[4 * f + 2] << 32) | (unsigned)F[4 * f + 1]);
  for (int c = threadIdx.x * %(chunk)d; c < F[4 * f + 3]; c += 32 * %(chunk)d)
    prefetch_l2(base + c, (unsigned)min(%(chunk)d, F[4 * f + 3] - c));
}"""
# warp 0: whether any of the task's counters is still short of its target (the scope stays open)
_MUST_WAIT = """    if (threadIdx.x < 32) {
      bool must_wait = false;
      for (int w = threadIdx.x; w < nw; w += 32)
        must_wait |= ld_acquire(&counters[W[2 * w]]) < (unsigned)W[2 * w + 1];"""
_PREFETCH = {
    "bulk": "    if (threadIdx.x < 32) {\n" + textwrap.indent(_BULK_LOOP, " " * 6) + "\n    }",
    # bulk L2 prefetch only when the task must wait: warp 0 looks at its counters once, and a task
    # whose inputs are ready issues nothing (its bytes would compete with its own loads), while one
    # that waits (most SMs during a layer's attention) streams its weights to L2 in the meantime
    "idle": _MUST_WAIT + """
      if (__any_sync(0xffffffffu, must_wait)) {
""" + textwrap.indent(_BULK_LOOP, " " * 8) + "\n      }\n    }",
    # every thread prefetches 128-byte lines (prefetch.global.L2::evict_last), before the barrier
    "lines": """    for (int f = 0; f < npf; ++f) {
      const char* base = (const char*)T[F[4 * f]] + (long long)(((unsigned long long)(unsigned)F[4 * f + 2] << 32) | (unsigned)F[4 * f + 1]);
      for (int c = threadIdx.x * 128; c < F[4 * f + 3]; c += MK_NT * 128)
        asm volatile("prefetch.global.L2::evict_last [%%0];" :: "l"(base + c));
    }""",
}
PREFETCH_MODES = tuple(_PREFETCH)
# a task that must wait sends the WS_L2_WAIT stages past the ring to L2 first, so the memory pipe
# works while the SM idles; a task whose inputs are ready adds nothing to its own streaming
_L2_WAIT = _MUST_WAIT + """
      if (__any_sync(0xffffffffu, must_wait) && threadIdx.x == 0) ws_l2(ws.issued + WS_L2_WAIT);
    }"""


# the main loop's claimed call: the tiles the producer warp took from the op's pool for this task,
# one after another, each announced with its first stage (ws_tile); a stage of no bytes, its
# tile -1, says the pool was empty, and is released unread
_CLAIM_LOOP = r"""#if WS_CLAIMS
      if (cc[3] == MK_CLAIMED) {
        for (int again = 0;; again = 1) {
          const unsigned g = ws.done;
          ws_wait(g);
          const int k = ws_tile[g %% WS_STAGES];
          MK_SYNC();
          if (k < 0) {
            if (threadIdx.x == 0) {
              asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0], %%1;"
                           :: "r"(smem_addr(&ws_empty[g %% WS_STAGES])), "r"(MK_NT / 32) : "memory");
              ws.done = g + 1;
            }
            MK_SYNC();
            break;
          }
          const int tl = cc[2] - cc[1], tlo = k * tl;
          switch (cc[0]) {
%(cases)s
          }
          MK_SYNC();
        }
        continue;
      }
#endif"""
