"""Sim-backend speed on the 1B-shaped decoder (issue 16's targets), on this machine's CPU:

    python bench/sim_speed.py [--out DIR] [--problem mk_llama_decode]

One process, side by side: the env's reset with nothing cached (the graph built on the meta device
and exported, then lowered, validated and predicted; the disk cache of captured graphs is a fresh
temporary folder), the same edit steps twice, once with build_plan's lowered-task-graph cache off
(every step lowers the model again) and once with it on, then resets in new processes, the
captured graph on disk (compiler.capture_cached), each timed after its imports. Most edits (SM ranges, counters, order, prefetch) leave the lowering as it was; a tile edit lowers
again either way. Writes bench/results/sim_speed.json. Targets: <= 50 ms per step, <= 1 s per reset.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gymnasium as gym  # noqa: E402

import megakernel_gym  # noqa: E402,F401
from judge_bench import spread, write  # noqa: E402
from megakernel_gym.compiler import tasks  # noqa: E402

EDITS = ["assign lm_head sms=0-99", "counter lm_head op", "prefetch layers.{0..15}.mlp.down_proj depth=1",
         "counter layers.{0..15}.mlp.down_proj op", "assign layers.{0..15}.attn.o_proj sms=0-63",
         "prefetch lm_head depth=1", "tile lm_head n=2004", "counter layers.{0..15}.attn.o_proj op"]


# a reset in a fresh interpreter, timed after its imports
_RESET = """
import time, gymnasium as gym, megakernel_gym
env = gym.make("MegaKernel-v0", backend="sim")
t0 = time.perf_counter()
env.reset(seed=0, options={{"problem": "{problem}"}})
print(time.perf_counter() - t0)
"""


def steps(env, edits) -> list[dict]:
    out = []
    for e in edits:
        t0 = time.perf_counter()
        _, reward, _, _, info = env.step(e)
        out.append({"edit": e, "seconds": round(time.perf_counter() - t0, 4), "reward": round(float(reward), 4),
                    "feedback": str(info.get("feedback", ""))[:160]})
        print(f"  {out[-1]['seconds']:7.3f} s  {e}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--problem", default="mk_llama_decode")
    args = ap.parse_args()
    rows, medians = [], {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["MKGYM_GRAPH_CACHE"] = cache
        for mode, lowered in (("lowering cache off", 0), ("lowering cache on", 4)):
            tasks._LOWERED.clear()
            tasks._LOWERED_MAX = lowered
            env = gym.make("MegaKernel-v0", backend="sim")
            t0 = time.perf_counter()
            env.reset(seed=0, options={"problem": args.problem})
            reset_s = time.perf_counter() - t0
            print(f"{mode}: reset {reset_s:.2f} s", flush=True)
            done = steps(env, EDITS)
            secs = [d["seconds"] for d in done]
            medians[mode] = statistics.median(secs)
            rows.append({"mode": mode, "problem": args.problem, "reset_s": round(reset_s, 3),
                         "reset_note": "nothing cached: capture included" if not rows else
                         "the problem's capture already cached in this process",
                         "step_s": spread(secs), "steps": done})
            env.close()
        resets = []
        for _ in range(3):   # a new process each time: only the disk cache of captured graphs is shared
            out = subprocess.run([sys.executable, "-c", _RESET.format(problem=args.problem)], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            resets.append(float(out.stdout.strip().splitlines()[-1]))
        print(f"reset with the captured graph on disk: {statistics.median(resets):.2f} s", flush=True)
        rows.append({"mode": "reset, captured graph on disk", "problem": args.problem, "reset_s": spread(resets),
                     "reset_note": "each in a new process (its imports not counted), the captured graph on disk"})
    on, off = medians["lowering cache on"], medians["lowering cache off"]
    warm = statistics.median(resets)
    rows.append({"mode": "summary", "step_median_s_off": off, "step_median_s_on": on, "speedup": round(off / on, 2)})
    targets = [{"target": "sim step on the 1B decoder <= 50 ms (median)", "measured": round(on, 3), "met": on <= 0.05},
               {"target": "reset <= 1 s (a new process, the problem's captured graph on disk)",
                "measured": round(warm, 3), "first_ever_s": rows[0]["reset_s"], "met": warm <= 1.0}]
    write("speed", rows, targets, args.out, prefix="sim_")


if __name__ == "__main__":
    main()
