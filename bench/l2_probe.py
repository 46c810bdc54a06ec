"""Does a weight stream go faster when part of it was sent to L2 while the SM waited, and by
which way of sending it?

    python bench/l2_probe.py [--out DIR] [--reps 15]

The megakernel's attention half leaves the memory pipe mostly idle for ~10 us a layer while
every SM's weight ring (5 x 32 KB) already holds what it can of the next ops' weights. L2 (50 MB
on an H100) could hold more, but every L2 prefetch tried inside the megakernel measured slower
(ring_depth_l2_wait.json, ab_knobs_l2_ahead_warp.json, ab_knobs_gateup_l2.json). This probe runs
only that access pattern: one block per SM, its producer warp filling a ring of 5 x 32 KB stages
as in the megakernel, while the block first sends the next `pf` bytes of its run to L2, then
waits `delay` ns (the attention half), then streams its whole run (512 KB, a gate+up task)
through the ring. Ways to send bytes to L2 (mode):
  none        nothing (the ring's prefill alone)
  bulk32      thread 0: cp.async.bulk.prefetch.L2, 32 KB per instruction (what the megakernel uses)
  bulk4       the same, 4 KB per instruction
  bulk32_last the same as bulk32 with an L2::evict_last cache hint
  line        the 256 compute threads: prefetch.global.L2, one per 128-byte line
  line_last   the same with prefetch.global.L2::evict_last
  load        the 256 compute threads: a 16-byte ld.global.L2::128B per 128-byte line (kept live)
  touch       one 16-byte load per 64 KB of the block's whole run, nothing else (whether a first touch
              of the run's pages, not the bytes in L2, is what a prefetch buys)
Per variant: the kernel's time (CUDA events, L2 flushed by a read before each launch), the stream
phase (after the delay to the last block's end, from %globaltimer), a block's own stream time
(median and max over blocks) and the span from the first block's start to the last one's end. Writes bench/results/l2_probe.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.cuda.nvrtc import load_cuda  # noqa: E402
from ring_probe_cuda import RING_PRELUDE  # noqa: E402

MODES = ("none", "bulk32", "bulk4", "bulk32_last", "line", "line_last", "load", "touch")
STAGES, STAGE = 5, 32768

SRC = RING_PRELUDE + r"""
// the first word of 16 bytes at p, with the whole 128-byte line brought to L2 or not
__device__ __forceinline__ unsigned first_word(const char* p, bool line) {
  unsigned x, y, z, v;
  if (line)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x), "=r"(y), "=r"(z), "=r"(v) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x), "=r"(y), "=r"(z), "=r"(v) : "l"(p));
  return x;
}
// modes: 0 none, 1 bulk32, 2 bulk4, 3 bulk32_last, 4 line, 5 line_last, 6 load, 7 touch
extern "C" __global__ void __launch_bounds__(288, 1) l2_probe(const char* w, long long per_block, int S, int stage,
    int mode, long long pf_bytes, long long delay_ns, unsigned long long* times, float* out) {
  const char* src = w + blockIdx.x * per_block;
  const int nst = (int)(per_block / stage), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ring_init(S);
  const unsigned long long t0 = gtime();
  if (warp == 8) {   // the producer warp: the ring, as the megakernel's ws_produce (no cap on copies in flight)
    if (lane == 0) ring_produce(src, nst, S, stage, S);
    return;
  }
  // the bytes past the ring's prefill go to L2 while the block waits
  const char* pf = src + (long long)S * stage;
  const long long pfn = min(pf_bytes, per_block - (long long)S * stage);
  unsigned keep = 0;
  if (mode >= 1 && mode <= 3) {
    if (threadIdx.x == 0) {
      const int chunk = mode == 2 ? 4096 : 32768;
      unsigned long long pol = 0;
      if (mode == 3) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
      for (long long c = 0; c < pfn; c += chunk) {
        const unsigned n = (unsigned)min((long long)chunk, pfn - c);
        if (mode == 3)
          asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" :: "l"(pf + c), "r"(n), "l"(pol) : "memory");
        else
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(pf + c), "r"(n) : "memory");
      }
    }
  } else if (mode == 4 || mode == 5) {
    for (long long c = (long long)threadIdx.x * 128; c < pfn; c += 256 * 128) {
      if (mode == 5) asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(pf + c) : "memory");
      else asm volatile("prefetch.global.L2 [%0];" :: "l"(pf + c) : "memory");
    }
  } else if (mode == 6 || mode == 7) {   // load: each line past the ring; touch: a word per 64 KB of the run
    const char* base = mode == 6 ? pf : src;
    const long long n = mode == 6 ? pfn : per_block, step = mode == 6 ? 128 : 65536;
    for (long long c = (long long)threadIdx.x * step; c < n; c += 256 * step) keep ^= first_word(base + c, mode == 6);
  }
  while (gtime() - t0 < (unsigned long long)delay_ns) { }
  const unsigned long long t1 = gtime();
  const float acc = ring_consume(nst, S, stage, warp);
  const unsigned long long t2 = gtime();
  if (threadIdx.x == 0) { times[3 * blockIdx.x] = t0; times[3 * blockIdx.x + 1] = t1; times[3 * blockIdx.x + 2] = t2; }
  if (acc == 12345.f || keep == 0x9e3779b9u) out[threadIdx.x] = acc + keep;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--per-block", type=int, default=512 * 1024)
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    mod = load_cuda(SRC, "l2_probe.cu")
    fn_name = "l2_probe"
    smem = STAGES * STAGE
    mod.set_max_dynamic_smem(fn_name, smem)
    fn = mod.get_function(fn_name)
    out = torch.zeros(288, device="cuda")
    times = torch.zeros(3 * sms, dtype=torch.int64, device="cuda")
    per_block = args.per_block
    w = torch.empty(sms * per_block + 4096, dtype=torch.uint8, device="cuda").random_()
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda").fill_(1.0)
    rest = per_block - STAGES * STAGE
    variants = [("none", 0, d) for d in (0, 8000, 30000)] + [("touch", 0, d) for d in (0, 8000)]
    for d in (0, 8000):
        for mode in MODES[1:-1]:
            for pf in (64 * 1024, 128 * 1024, rest):
                variants.append((mode, pf, d))
    for mode in ("bulk32", "line", "load"):   # all of the run past the ring in L2 long before it is read
        variants.append((mode, rest, 30000))
    rows = []
    for mode, pf, delay in variants:
        kern, stream, med_block, max_block, span = [], [], [], [], []
        for r in range(args.reps + 2):
            flush.sum()   # reads: L2 left holding clean lines, as a decode step finds it
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn((sms,), (288,), (w, per_block, STAGES, STAGE, MODES.index(mode), pf, delay, times, out), shared_mem=smem)
            b.record()
            torch.cuda.synchronize()
            if r >= 2:
                t = times.view(sms, 3).double()
                kern.append(a.elapsed_time(b) * 1e3)
                stream.append(float((t[:, 2].max() - t[:, 1].max()) / 1e3))
                med_block.append(float((t[:, 2] - t[:, 1]).median() / 1e3))
                max_block.append(float((t[:, 2] - t[:, 1]).max() / 1e3))
                span.append(float((t[:, 2].max() - t[:, 0].min()) / 1e3))
        row = {"mode": mode, "pf_bytes": pf, "delay_ns": delay, "per_block_bytes": per_block, "blocks": sms,
               "kernel_us": statistics.median(kern), "kernel_p10_us": sorted(kern)[len(kern) // 10],
               "kernel_p90_us": sorted(kern)[len(kern) * 9 // 10],
               "stream_us": statistics.median(stream), "stream_p10_us": sorted(stream)[len(stream) // 10],
               "stream_p90_us": sorted(stream)[len(stream) * 9 // 10],
               "block_stream_median_us": statistics.median(med_block), "block_stream_max_us": statistics.median(max_block),
               "span_us": statistics.median(span)}
        rows.append(row)
        print(f"{mode:12s} pf {pf // 1024:4d} KB  delay {delay / 1000:5.1f} us  kernel {row['kernel_us']:7.1f} us  "
              f"stream {row['stream_us']:7.1f} us (a block's median {row['block_stream_median_us']:5.1f}, max "
              f"{row['block_stream_max_us']:5.1f})  span {row['span_us']:6.1f} us", flush=True)
    base = {r["delay_ns"]: r["stream_us"] for r in rows if r["mode"] == "none"}
    for r in rows:
        r["stream_vs_none"] = base[r["delay_ns"]] / r["stream_us"] if r["delay_ns"] in base else None
    write("probe", rows, [], Path(args.out), prefix="l2_",
          notes=f"{sms} blocks of 288 threads (8 compute warps and a producer warp), a ring of {STAGES} x "
                f"{STAGE // 1024} KB; each block streams its own {per_block // 1024} KB once after sending the "
                f"next pf bytes past the ring's prefill to L2 and waiting delay_ns; L2 flushed before each launch "
                f"(a 256 MB read, so its lines are clean); stream_us = last block's end - last block's end of waiting")


if __name__ == "__main__":
    main()
