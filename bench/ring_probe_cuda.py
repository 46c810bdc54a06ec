"""CUDA C shared by the probes that stream weights the way the megakernel's ring does
(bench/l2_probe.py, bench/poll_probe.py): the ring's buffers and barriers, %globaltimer, a fold
that keeps the loaded bytes live, and a wait on a barrier's phase."""

RING_PRELUDE = r"""
extern __shared__ float4 smem[];
__shared__ __align__(8) unsigned long long full_bar[8];    // a stage's bytes have landed
__shared__ __align__(8) unsigned long long empty_bar[8];   // every consumer warp is done with it
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
"""
