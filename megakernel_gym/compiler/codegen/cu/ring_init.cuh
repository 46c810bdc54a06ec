  {   // the weight ring: the queue's segments into shared memory, the barriers, the first stages
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
  }