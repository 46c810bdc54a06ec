"""`mkgym judge` from the shell, command to JSON (issue 41, item 4: at most 3 s on a GPU for a problem whose
baselines are in the store, and 8 concurrent calls each at most 2x that). Run on a GPU host (or --backend cpu):

    python bench/judge_cli.py [--backend gpu] [--problem softmax] [--warm 5] [--concurrent 8] [--out DIR]

Each call is a new `python -m megakernel_gym.cli judge PROBLEM reference --json --no-cache` process, timed
from its start to its exit (the candidate judged again every time; only the baselines come from the store).
In one run, with a fresh run dir and results store:
  1. in-process (--no-server) twice: the first computes the baselines into the store, the second is the
     one-off judge before the server (a Judge started and closed by the command);
  2. the first call that starts the judge server (cold), then `--warm` calls one after another;
  3. `--concurrent` calls started at once, each one's own command-to-JSON time.
Writes bench/results/judge_cli.json (per phase the median, min and max, and the targets).
"""
from __future__ import annotations

import argparse
import json
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


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values), "values": [round(v, 3) for v in values]}


def call(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "megakernel_gym.cli", "judge", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def finish(p: subprocess.Popen, t0: float) -> tuple[float, dict]:
    out, err = p.communicate(timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"mkgym judge failed ({p.returncode}):\n{err[-3000:]}")
    d = json.loads(out)
    if d["status"] != "correct":
        raise SystemExit(f"the reference was judged {d['status']}: {d['reason']}")
    return wall, d


def main() -> None:
    from judge_bench import write
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--problem", default="softmax")
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="judge_cli_"))
    env = {**os.environ, "MKGYM_RUN_DIR": str(tmp / "run"), "MKGYM_JUDGE_IDLE": "600"}
    base = [a.problem, "reference", "--backend", a.backend, "--json", "--no-cache", "--store", str(tmp / "r.sqlite")]
    rows, res = [], None
    try:
        here = []
        for i in range(2):
            t0 = time.perf_counter()
            wall, res = finish(call(base + ["--no-server"], env), t0)
            here.append(wall)
            print(f"in-process {i}: {wall:.2f} s", flush=True)
        rows.append({"phase": "in-process (--no-server), baselines computed by the first", "command_s": spread(here)})
        t0 = time.perf_counter()
        cold, _ = finish(call(base, env), t0)
        print(f"server cold start: {cold:.2f} s", flush=True)
        rows.append({"phase": "first call: starts the judge server", "command_s": spread([cold])})
        warm = []
        for i in range(a.warm):
            t0 = time.perf_counter()
            wall, res = finish(call(base, env), t0)
            warm.append(wall)
            print(f"warm {i}: {wall:.2f} s", flush=True)
        rows.append({"phase": "later calls, one after another", "command_s": spread(warm),
                     "judge_elapsed_s": res.get("elapsed_s"), "device": res.get("device")})
        t0 = time.perf_counter()
        procs = [call(base, env) for _ in range(a.concurrent)]
        conc = [finish(p, t0)[0] for p in procs]
        print(f"{a.concurrent} at once: {' '.join(f'{w:.2f}' for w in conc)}", flush=True)
        rows.append({"phase": f"{a.concurrent} calls started at once", "command_s": spread(conc)})
    finally:
        subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "judge-server", "stop"], env=env,
                       capture_output=True, timeout=120)
    w = statistics.median(warm)
    targets = [
        {"target": "a one-off mkgym judge in at most 3 s, command to JSON, baselines in the store (issue 41, item 4; "
                   "the server running)", "measured": round(w, 3), "met": w <= 3.0},
        {"target": f"{a.concurrent} concurrent mkgym judge calls each at most 2x that (6 s)",
         "measured": round(max(conc), 3), "met": max(conc) <= 6.0},
        {"target": "the first call, which starts the server, no slower than a judge in the process + 2 s",
         "measured": round(cold, 3), "in_process_s": round(here[1], 3), "met": cold <= here[1] + 2.0},
    ]
    write("cli", rows, targets, Path(a.out),
          notes=f"backend {a.backend}; problem {a.problem}, its shipped Triton reference judged again by every call "
                "(--no-cache); each call a new process: python -m megakernel_gym.cli judge ...")
    print(json.dumps(targets, indent=1))


if __name__ == "__main__":
    main()
