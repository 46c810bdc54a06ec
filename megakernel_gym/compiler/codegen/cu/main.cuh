
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
