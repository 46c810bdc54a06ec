"""CUDA C shared by the probes that stream weights the way the megakernel's ring does
(bench/l2_probe.py, bench/poll_probe.py): the ring's buffers and barriers, %globaltimer, a fold
that keeps the loaded bytes live, a wait on a barrier's phase, and the ring itself (its barriers'
set-up, the producer warp's copies, the consumer warps' reads)."""

RING_PRELUDE = r"""
#ifndef RING_MAX_STAGES
#define RING_MAX_STAGES 32   // the most stages a ring may have (barrier pairs in static shared memory)
#endif
extern __shared__ float4 smem[];
__shared__ __align__(8) unsigned long long full_bar[RING_MAX_STAGES];    // a stage's bytes have landed
__shared__ __align__(8) unsigned long long empty_bar[RING_MAX_STAGES];   // every consumer warp is done with it
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long g; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g)); return g;
}
__device__ __forceinline__ float fold(uint4 v) {
  return __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
}
__device__ __forceinline__ void bar_wait(unsigned b, unsigned parity) {
  unsigned ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(b), "r"(parity) : "memory");
}
// every thread of the block: the ring's S full barriers (one arrival, the copy's bytes) and empty
// barriers (one arrival per consumer warp, 8)
__device__ __forceinline__ void ring_init(int S) {
  if (threadIdx.x == 0) {
    for (int b = 0; b < S; ++b) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&full_bar[b])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" :: "r"(sa(&empty_bar[b])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
}
// the producer's lane, as the megakernel's ws_produce: nst stages of `stage` bytes from src, each once
// its buffer is free and (inflight < S) once at most inflight - 1 stages are on their way
__device__ __forceinline__ void ring_produce(const char* src, int nst, int S, int stage, int inflight) {
  for (int g = 0; g < nst; ++g) {
    if (g >= S) bar_wait(sa(&empty_bar[g % S]), (g / S - 1) & 1u);
    if (inflight < S && g >= inflight) bar_wait(sa(&full_bar[(g - inflight) % S]), ((g - inflight) / S) & 1u);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const unsigned b = sa(&full_bar[g % S]), dst = sa((char*)smem + (g % S) * stage);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(stage) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src + (long long)g * stage), "r"(stage), "r"(b) : "memory");
  }
}
// consumer warp w (0-7): its 1/8 of each of the nst stages summed, then the stage released
__device__ __forceinline__ float ring_consume(int nst, int S, int stage, int w) {
  float acc = 0.f;
  const int seg = stage / 8 / 16, lane = threadIdx.x % 32;
  for (int g = 0; g < nst; ++g) {
    bar_wait(sa(&full_bar[g % S]), (g / S) & 1u);
    const uint4* s4 = (const uint4*)((char*)smem + (g % S) * stage) + w * seg;
    for (int v = lane; v < seg; v += 32) acc += fold(s4[v]);
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(&empty_bar[g % S])) : "memory");
  }
  return acc;
}
"""
