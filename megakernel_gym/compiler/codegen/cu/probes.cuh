
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
