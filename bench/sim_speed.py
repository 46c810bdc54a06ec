"""Sim-backend speed on the 1B-shaped decoder (issue 16's targets), on this machine's CPU:

    python bench/sim_speed.py [--out DIR] [--problem mk_llama_decode] [--random 60]

One process, one env (as an RL loop runs it), the steps of three kinds of work timed one by one:
- `fixed`: eight edits of SM ranges, counters, prefetch depths and one tile size, one a step;
- `random`: random edit lines of every verb but impl (ir_exposure.edits.random_edit: tile sizes,
  SM ranges, op order, counters, prefetch, fusions, inlines, splits), one a step, valid or not (the
  env refuses about half, with the reason, which is a step too);
- `policies`: whole episodes of the expert, heuristic, random and trained lm policies (greedy, and
  sampled as GRPO samples it), each from a reset (not timed as a step); their batches fuse, inline,
  split and retile dozens of ops at once.
Then resets: the first in the process with nothing cached (the graph built on the meta device and
exported; the disk cache of captured graphs is a fresh temporary folder), and three in new
processes with the captured graph on disk, each timed after its imports. Writes
bench/results/sim_speed.json. Targets: the median step <= 50 ms over all steps, and <= 1 s per reset.
"""
from __future__ import annotations

import argparse
import os
import random
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
from judge_bench import write  # noqa: E402
from megakernel_gym.ir_exposure.edits import random_edit  # noqa: E402

EDITS = ["assign lm_head sms=0-99", "counter lm_head op", "prefetch layers.{0..15}.mlp.down_proj depth=1",
         "counter layers.{0..15}.mlp.down_proj op", "assign layers.{0..15}.attn.o_proj sms=0-63",
         "prefetch lm_head depth=1", "tile lm_head n=2004", "counter layers.{0..15}.attn.o_proj op"]
# (policy name, its keyword arguments, seed): the lm policy sampled as GRPO samples it
POLICY_RUNS = [("expert", {}, 0), ("heuristic", {}, 0), ("random", {}, 0), ("random", {}, 1), ("lm", {}, 0)] + \
    [("lm", {"sample": True}, s) for s in range(1, 6)]

# a reset in a fresh interpreter, timed after its imports
_RESET = """
import time, gymnasium as gym, megakernel_gym
env = gym.make("MegaKernel-v0", backend="sim")
t0 = time.perf_counter()
env.reset(seed=0, options={{"problem": "{problem}"}})
print(time.perf_counter() - t0)
"""


def timed_step(env, action) -> tuple[float, dict, bool]:
    t0 = time.perf_counter()
    _, _, term, trunc, info = env.step(action)
    return time.perf_counter() - t0, info, term or trunc


def record(kind: str, text: str, seconds: float, info: dict) -> dict:
    ev = info.get("eval") or {}
    return {"kind": kind, "edit": text if len(text) < 200 else f"{text[:120]}... ({len(text.splitlines())} lines)",
            "seconds": round(seconds, 4), "accepted": ev.get("status") == "correct",
            "speedup": ev.get("speedup")}


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    q = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    return {"n": len(xs), "median": round(statistics.median(xs), 4), "p10": round(q(0.1), 4),
            "p90": round(q(0.9), 4), "max": round(xs[-1], 4), "mean": round(statistics.fmean(xs), 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--problem", default="mk_llama_decode")
    ap.add_argument("--random", type=int, default=60, help="random edit lines to send (one a step)")
    args = ap.parse_args()
    from megakernel_gym.policies.baselines import make_policy
    steps: list[dict] = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["MKGYM_GRAPH_CACHE"] = cache
        env = gym.make("MegaKernel-v0", backend="sim")
        opts = {"problem": args.problem}
        t0 = time.perf_counter()
        env.reset(seed=0, options=opts)
        first_reset = time.perf_counter() - t0
        print(f"first reset (nothing cached, capture included): {first_reset:.2f} s", flush=True)
        for e in EDITS:
            secs, info, _ = timed_step(env, e)
            steps.append(record("fixed", e, secs, info))
            print(f"  fixed   {secs * 1e3:7.1f} ms  {e}", flush=True)
        env.reset(seed=0, options=opts)
        rng = random.Random(0)
        for i in range(args.random):
            e = random_edit(env.unwrapped.ir, rng)
            secs, info, done = timed_step(env, e)
            steps.append(record("random", e, secs, info))
            print(f"  random  {secs * 1e3:7.1f} ms  {'ok ' if steps[-1]['accepted'] else 'no '} {e}", flush=True)
            if done:
                env.reset(seed=i, options=opts)
        for name, kw, seed in POLICY_RUNS:
            pol = make_policy(name, seed=seed, **kw)
            obs, info = env.reset(seed=seed, options=opts)
            pol.reset(env.unwrapped, obs, info)
            while True:
                action = pol.act(obs, info)
                secs, info, done = timed_step(env, action)
                if info["action"]["kind"] != "submit":
                    steps.append(record(f"policy {name}{' sampled' if kw else ''}", action, secs, info))
                    print(f"  {name:7s} {secs * 1e3:7.1f} ms  {'ok ' if steps[-1]['accepted'] else 'no '} "
                          f"{len(action.splitlines())} line(s)", flush=True)
                if done:
                    break
        env.close()
        resets = []
        for _ in range(3):   # a new process each time: only the disk cache of captured graphs is shared
            out = subprocess.run([sys.executable, "-c", _RESET.format(problem=args.problem)], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            resets.append(float(out.stdout.strip().splitlines()[-1]))
        print(f"reset with the captured graph on disk: {statistics.median(resets):.2f} s", flush=True)
    secs = [s["seconds"] for s in steps]
    groups = {"all": secs, "fixed": [s["seconds"] for s in steps if s["kind"] == "fixed"],
              "random": [s["seconds"] for s in steps if s["kind"] == "random"],
              "random, accepted": [s["seconds"] for s in steps if s["kind"] == "random" and s["accepted"]],
              "random, refused": [s["seconds"] for s in steps if s["kind"] == "random" and not s["accepted"]],
              "policies": [s["seconds"] for s in steps if s["kind"].startswith("policy")]}
    rows = [{"mode": "steps", "problem": args.problem, "group": k, "step_s": stats(v)} for k, v in groups.items()]
    rows.append({"mode": "reset", "problem": args.problem, "first_in_process_s": round(first_reset, 3),
                 "note": "nothing cached: the graph built on the meta device and exported (torch.export)"})
    rows.append({"mode": "reset, captured graph on disk", "problem": args.problem, "reset_s": stats(resets),
                 "note": "each in a new process (its imports not counted), the captured graph on disk"})
    rows.append({"mode": "each step", "steps": steps})
    med, warm = statistics.median(secs), statistics.median(resets)
    targets = [{"target": "sim step on the 1B decoder <= 50 ms (median over every step above)",
                "measured": round(med, 4), "met": med <= 0.05},
               {"target": "reset <= 1 s (a new process, the problem's captured graph on disk)",
                "measured": round(warm, 3), "first_ever_s": round(first_reset, 3), "met": warm <= 1.0}]
    for r in rows[:len(groups)]:
        print(f"  {r['group']:18s} {r['step_s']}", flush=True)
    write("speed", rows, targets, args.out, prefix="sim_")


if __name__ == "__main__":
    main()
