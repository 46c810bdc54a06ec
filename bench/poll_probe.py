"""How long does an SM take to see a word another SM wrote, while weight streams run?

    python bench/poll_probe.py [--out DIR] [--polls 30] [--period-ns 4000] [--inflight N ...]
                               [--rings STAGES:BYTES ...] [--tag _x]

In the megakernel every dependency hop is a poll: a task loads its input's LL words until they
carry this launch's epoch. The task probes show a task on an SM that has just refilled its weight
ring seeing its input ~2 us later than a task on an idle SM (README, task_probe_cw_tasks.json).
This probe isolates that: block 0 writes a flag every `period` ns (st.relaxed.gpu, recording
%globaltimer); one lane of warp 0 of every other block polls it with a given load and records when
it saw each value. Meanwhile each block's producer warp streams its own 5 MB through a ring of 5 x
32 KB bulk copies (as the megakernel's), consumed by 8 warps: in no block, every block, or every
other block (so a poller on an idle SM next to streaming ones separates its own SM's copies in
flight from the chip's load), and with the ring's stages in flight capped. Loads: relaxed (ld.relaxed.gpu, the megakernel's LL polls), acquire
(ld.acquire.gpu, its counters), volatile (ld.volatile.global). Writes bench/results/poll_probe.json:
per setting, the latency's median and p90 over blocks and polls, for streaming and idle pollers.
`--rings 10:16384 ...` streams the same shared memory in finer stages (every block streaming, at each
--inflight): on an H100 the bytes in flight set the latency and the rate whatever the copy size
(poll_probe_s23_rings.json: 64 KB as 2 x 32, 4 x 16 or 8 x 8 KB, 0.77-1.02 us at 3.09-3.11 TB/s).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.cuda.nvrtc import load_cuda  # noqa: E402
from ring_probe_cuda import RING_PRELUDE  # noqa: E402

LOADS = ("relaxed", "acquire", "volatile")
STREAMS = ("none", "all", "alternate")
STAGES, STAGE, PER_BLOCK = 5, 32768, 5 * 1024 * 1024

SRC = RING_PRELUDE + r"""
__device__ __forceinline__ unsigned poll_load(const unsigned* p, int kind) {
  unsigned v;
  if (kind == 0) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else if (kind == 1) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// warp 0: block 0 writes, the others poll; warps 1-8 consume the ring; warp 9 is its producer
extern "C" __global__ void __launch_bounds__(320, 1) poll_probe(const char* w, unsigned* flag, int polls,
    long long period_ns, int load_kind, int stream, int inflight, unsigned long long* times, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool streams = stream == 1 || (stream == 2 && (blockIdx.x & 1));
  const int nst = streams ? (int)(@PER_BLOCK@ll / @STAGE@) : 0;
  const char* src = w + (long long)blockIdx.x * @PER_BLOCK@ll;
  ring_init(@STAGES@);
  unsigned long long* row = times + (long long)blockIdx.x * (polls + 2);
  if (warp == 9) {
    if (lane == 0) ring_produce(src, nst, @STAGES@, @STAGE@, inflight);
    return;
  }
  if (warp >= 1) {
    const float acc = ring_consume(nst, @STAGES@, @STAGE@, warp - 1);
    if (warp == 1 && lane == 0) row[polls + 1] = gtime();   // this block's stream ended
    if (acc == 12345.f) out[threadIdx.x] = acc;
    return;
  }
  if (lane != 0) return;
  const unsigned long long t0 = gtime();
  if (blockIdx.x == 0) {   // the writer: value k at t0 + k * period (after a first period of ramp-up)
    for (int k = 1; k <= polls; ++k) {
      while (gtime() < t0 + (unsigned long long)(k + 2) * period_ns) { }
      asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(flag), "r"((unsigned)k) : "memory");
      row[k] = gtime();
    }
    row[0] = t0;
    return;
  }
  for (int k = 1; k <= polls; ++k) {
    while (poll_load(flag, load_kind) < (unsigned)k) { }
    row[k] = gtime();
  }
  row[0] = t0;
}
"""


def parse_ring(spec: str) -> tuple[int, int]:
    """A --rings entry, STAGES:BYTES (e.g. 10:16384), as (stages, bytes a stage)."""
    try:
        stages, stage = (int(x) for x in spec.split(":"))
    except ValueError:
        raise SystemExit(f"--rings {spec!r}: give STAGES:BYTES, e.g. 10:16384") from None
    if not (1 <= stages <= 32 and stage % 4096 == 0 and PER_BLOCK % stage == 0 and stages * stage <= 200 * 1024):
        raise SystemExit(f"--rings {spec!r}: 1-32 stages of a multiple of 4096 bytes that divides "
                         f"{PER_BLOCK} bytes, at most 200 KB in all")
    return stages, stage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--period-ns", type=int, default=4000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--inflight", type=int, nargs="*", default=[5, 3, 2, 1],
                    help="most stages a streaming block keeps in flight (issued, not landed)")
    ap.add_argument("--rings", nargs="*", default=[f"{STAGES}:{STAGE}"], metavar="STAGES:BYTES",
                    help="the streaming rings to probe: the first with every stream and load setting, the "
                         "others with every block streaming at each --inflight only (the same shared "
                         "memory in finer stages asks whether the bytes in flight or the copies set a "
                         "poll's latency)")
    ap.add_argument("--tag", default="", help="suffix of the result's name (poll_probe<tag>.json)")
    args = ap.parse_args()
    rings = [parse_ring(r) for r in args.rings]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    w = torch.empty(sms * PER_BLOCK + 4096, dtype=torch.uint8, device="cuda").random_()
    flag = torch.zeros(64, dtype=torch.int32, device="cuda")
    out = torch.zeros(320, device="cuda")
    times = torch.zeros(sms * (args.polls + 2), dtype=torch.int64, device="cuda")
    rows = []
    settings = [(rings[0], st, ld, rings[0][0]) for st in STREAMS for ld in LOADS]
    settings += [(ring, "all", "relaxed", n) for i, ring in enumerate(rings) for n in args.inflight
                 if n < ring[0] or (i > 0 and n == ring[0])]
    fns = {}
    for (stages, stage), stream, load, inflight in settings:
        if (stages, stage) not in fns:
            source = (SRC.replace("@STAGES@", str(stages)).replace("@STAGE@", str(stage))
                      .replace("@PER_BLOCK@", str(PER_BLOCK)))
            mod = load_cuda(source, f"poll_probe_{stages}x{stage}.cu")
            mod.set_max_dynamic_smem("poll_probe", stages * stage)
            fns[(stages, stage)] = mod.get_function("poll_probe")
        fn, smem = fns[(stages, stage)], stages * stage
        lat, rate = {True: [], False: []}, []
        for _ in range(args.reps):
            flag.zero_()
            times.zero_()
            fn((sms,), (320,), (w, flag, args.polls, args.period_ns, LOADS.index(load), STREAMS.index(stream),
                                inflight, times, out), shared_mem=smem)
            torch.cuda.synchronize()
            t = times.view(sms, args.polls + 2).double().cpu()
            written = t[0, 1:args.polls + 1]
            if stream == "all":   # the stream's rate: every block's 5 MB over the last one's end
                rate.append(sms * PER_BLOCK / ((t[:, args.polls + 1].max() - t[:, 0].min()).item() * 1e-9) / 1e9)
            for b in range(1, sms):
                streams = stream == "all" or (stream == "alternate" and b % 2 == 1)
                end = t[b, args.polls + 1].item() if streams else float("inf")
                for k in range(args.polls):
                    if t[b, k + 1] <= end:   # polls while this block still streamed (all, when it does not)
                        lat[streams].append((t[b, k + 1] - written[k]).item() / 1e3)
        for streams, v in lat.items():
            if not v:
                continue
            v.sort()
            rows.append({"streams": stream, "load": load, "ring_stages": stages, "stage_bytes": stage,
                         "inflight_stages": inflight, "inflight_bytes": min(inflight, stages) * stage,
                         "poller_streams": streams,
                         "stream_gb_per_s": sorted(rate)[len(rate) // 2] if rate else None, "n": len(v),
                         "median_us": v[len(v) // 2], "p10_us": v[len(v) // 10], "p90_us": v[len(v) * 9 // 10]})
            print(f"ring {stages}x{stage >> 10}KB streams {stream:9s} inflight {inflight} load {load:8s} poller {'streaming' if streams else 'idle':9s} n {len(v):5d} "
                  f"latency median {rows[-1]['median_us']:5.2f} us  p10 {rows[-1]['p10_us']:5.2f}  "
                  f"p90 {rows[-1]['p90_us']:5.2f}" + (f"  stream {rate[0]:.0f}.. GB/s" if rate else ""), flush=True)
    write("probe" + args.tag, rows, [], Path(args.out), prefix="poll_",
          notes=f"{sms} blocks of 320 threads; block 0 writes a flag every {args.period_ns} ns, one lane of every other "
                f"block polls it; streaming blocks pull {PER_BLOCK >> 20} MB each through a bulk-copy ring of "
                + ", ".join(f"{n} x {b >> 10} KB" for n, b in rings) + " meanwhile, at most inflight_stages of them issued and not landed; latency = %globaltimer when seen - when written (its resolution shows as "
                "steps in the quantiles)")


if __name__ == "__main__":
    main()
