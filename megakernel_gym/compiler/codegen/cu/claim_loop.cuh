#if WS_CLAIMS
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
#endif