
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
// the dynamic region starts 128-byte aligned whatever the static variables before it take (with them at 144
// bytes, llama-1b's ring stages sat 16 bytes off a line and a searched schedule took 1.07x the time on an H200)
extern __shared__ __align__(128) float4 mk_smem[];
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
