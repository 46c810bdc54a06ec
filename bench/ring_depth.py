"""How deep the weight ring should look ahead: the expert schedule with more ring stages in shared
memory and with stages past the ring prefetched to L2 by the ring's producer, side by side in one run.

    python bench/ring_depth.py [--out DIR] [--model llama-1b] [--iters 30]
                               [--configs 4:0 5:0 4:4 5:4 5:8] [--no-deps 4:0]

A config is STAGES:L2[:WAIT] (codegen.emit_cuda's ring_stages, l2_ahead and l2_wait: stages past the
ring prefetched to L2 always, and only when a task must wait). The question it answers: while
a layer's attention half waits on its chain of small tasks (q/k/v, cache writes, attention, o_proj),
is the memory pipe idle because each SM can only have the ring's 128 KB of weights in flight? If so,
a deeper lookahead lets the MLP's weights stream during those waits.

`--no-deps` rows are a diagnostic, not a schedule: the counters start full, so no task waits for
another and the output is wrong; the time is what the same tasks cost as pure streaming, the ceiling
of the schedule with every dependency bubble removed. Writes ring_depth.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_edits import layer_profile, load_step, rel_err  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402


def config(text: str) -> tuple[int, int, int]:
    stages, l2, *wait = (int(x) for x in text.split(":"))
    return stages, l2, (wait or [0])[0]


def no_deps_call(launch):
    """The launch with its counters pre-filled, so every wait is already met (diagnostic only)."""
    def call():
        launch.counters.fill_(1 << 30)
        launch.enqueue()
    return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--configs", nargs="+", default=["4:0", "5:0", "4:4", "5:4", "5:8"])
    ap.add_argument("--no-deps", nargs="*", default=["4:0"])
    ap.add_argument("--profile-layer", type=int, default=5)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    step = load_step(args.model)
    base = step.base
    ir = apply_edits(base, expert_edits(base))
    plan = ir.plan()
    rows = []
    todo = [(c, False) for c in args.configs] + [(c, True) for c in args.no_deps]
    for text, nodeps in todo:
        stages, l2, wait = config(text)
        t0 = time.perf_counter()
        mk = Megakernel(plan, impls=ir.impls, ring_stages=stages, l2_ahead=l2, l2_wait=wait)
        launch = mk.bind(step.params, step.feeds, trace=True)
        (no_deps_call(launch) if nodeps else launch)()
        launch.check()
        got = launch.outputs()[step.graph.outputs[0]]
        timed = mk.bind(step.params, step.feeds)
        t = time_us(no_deps_call(timed) if nodeps else timed, args.iters)
        start, finish = launch.task_times_us()
        row = {"variant": f"expert, ring {mk.table.ws_stages} stages + {l2} to L2" + (f", {wait} to L2 while waiting" if wait else "")
               + (" [no deps: diagnostic]" if nodeps else ""),
               "ring_stages": mk.table.ws_stages, "l2_ahead": l2, "l2_wait": wait, "no_deps": nodeps,
               "smem_bytes": mk.table.smem_bytes,
               "megakernel": t, "floor_share": step.floor_us / t["median_us"],
               "rel_l2_err_vs_fp32": None if nodeps else rel_err(got, step.truth),
               "layer_profile": layer_profile(plan, start, finish, args.profile_layer),
               "build_s": time.perf_counter() - t0}
        rows.append(row)
        print(f"{row['variant']:50s} {t['median_us']:8.1f} us (p10 {t['p10_us']:.1f}, p90 {t['p90_us']:.1f})  "
              f"floor {row['floor_share']:.1%}  err/fp32 {row['rel_l2_err_vs_fp32']}", flush=True)
        for line in row["layer_profile"]:
            print("   ", line, flush=True)
        del launch, timed, mk
    real = [r for r in rows if not r["no_deps"]]
    ref = next((r for r in real if r["ring_stages"] == 4 and r["l2_ahead"] == 0 and not r["l2_wait"]), real[0])
    for r in rows:
        r["speedup_over_ring4"] = ref["megakernel"]["median_us"] / r["megakernel"]["median_us"]
    best = min(real, key=lambda r: r["megakernel"]["median_us"])
    targets = [
        {"target": "every real config as close to the float32 truth as eager bf16 (relative L2 error <= 1.5x eager's)",
         "measured": max(r["rel_l2_err_vs_fp32"] for r in real), "eager": step.eager_err,
         "met": all(r["rel_l2_err_vs_fp32"] <= 1.5 * step.eager_err for r in real)},
        {"target": "best expert schedule <= 950 us on an H100 (issue 15)", "measured": best["megakernel"]["median_us"],
         "variant": best["variant"], "met": best["megakernel"]["median_us"] <= 950},
    ]
    write("ring_depth", rows, targets, out, prefix="",
          notes=f"model {args.model} on {torch.cuda.get_device_name()}; expert schedule; floor {step.floor_us:.0f} us "
                f"({step.bw:.0f} GB/s copy bandwidth measured in this run); speedups against the ring of 4 stages "
                "without L2 lookahead (the code generator's default)")


if __name__ == "__main__":
    main()
