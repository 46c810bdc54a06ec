"""The megakernel's CUDA text around the task bodies: the prelude (types, bf16, reductions, the
counters' waits and signals), the weight ring, the main loop, prefetch modes, probes and claims.
Python %-format templates, the long ones kept as CUDA files in cu/ (package data), filled in by emit.py.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

_CU = Path(__file__).with_name("cu")


def _load(name: str) -> str:
    """A template's CUDA text, kept in cu/ as the file it is (package data), %-placeholders and all."""
    return (_CU / name).read_text(encoding="utf-8")


# Probes (emit_cuda probes=True, a diagnostic): each task's trace row gets PROBE_WORDS words: the
# %globaltimer at its start (waits over) and finish, as without probes, then the SM's clock64 when the
# queue reaches it, when its waits are over, when its input vector is on chip, when its first
# weight stage is in (attention: its first scores), when its last row is done, and when it has signalled.
PROBE_WORDS = 8
PROBE_NAMES = ("dequeued", "started", "input", "first", "last", "signalled")   # words 2..7
_PROBES = _load("probes.cuh")

_THREADS = _load("threads.cuh")

_PRELUDE = _load("prelude.cuh")

_NO_RING = """
#define WS_REFILL do { } while (0)
#define WS_STAGES 0
#define WS_STAGE 0
#define WS_SEGS 0
#define WS_SEG_BYTES 16
#define MK_OPEN() do { } while (0)
// the dynamic region starts 128-byte aligned whatever the static variables before it take (with them at 144
// bytes, llama-1b's ring stages sat 16 bytes off a line and a searched schedule took 1.07x the time on an H200)
extern __shared__ __align__(128) float4 mk_smem[];
"""

_RING_INIT = _load("ring_init.cuh")

_RING = _load("ring.cuh")

_MAIN = _load("main.cuh")


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
_CLAIM_LOOP = _load("claim_loop.cuh")
