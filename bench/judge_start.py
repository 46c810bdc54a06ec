"""Where a judge's start goes (issue 41, item 4: a one-off `mkgym judge` took 22 s on a GPU, 12-15 s of it
starting workers). Run on a GPU host (or --backend cpu here):

    python bench/judge_start.py [--backend gpu] [--starts 3] [--out DIR]

Starts a fresh Judge `--starts` times, each in a new process of its own (as `mkgym judge` does), and
reads each worker's ready header: the phases the worker times itself (sandbox.worker_main: isolation,
import torch, CUDA's start, import triton, the candidate's launch counter; until 11-29 also import
torch._dynamo) and the judge's whole spawn-to-ready. Each process then evaluates the softmax
problem's Triton reference answer (its baselines computed by the first and found in the results store by the rest, the issue's
case; `--no-evaluate` skips it: the cpu backend's torch.compile baseline takes minutes). Writes
bench/results/judge_start.json: per phase the median and range over the starts, and the target's
measured value (a one-off judge in at most 3 s, command to result, baselines in the store).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ONE_START = r"""
import json, sys, time
t0 = time.perf_counter()
from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.rewards import Judge
t_import = time.perf_counter() - t0
t_j = time.perf_counter()
j = Judge(backend=sys.argv[1])
t1 = time.perf_counter()
j.warm()
t_warm = time.perf_counter() - t1
out = {"import_s": round(t_import, 3), "judge_s": round(t1 - t_j, 3), "warm_s": round(t_warm, 3),
       "ref": j.ref.info.get("startup_s"), "cand": j.cand.info.get("startup_s")}
if sys.argv[2] == "1":
    t_p = time.perf_counter()
    p = get_problem("softmax")
    answer = reference_candidates("softmax")["triton"]
    out["problem_s"] = round(time.perf_counter() - t_p, 3)
    t2 = time.perf_counter()
    j.baselines(p)
    out["baselines_s"] = round(time.perf_counter() - t2, 3)
    t3 = time.perf_counter()
    r = j.evaluate(p, answer)
    out["evaluate_s"] = round(time.perf_counter() - t3, 3)
    out["status"] = r.status
t_c = time.perf_counter()
j.close()
out["close_s"] = round(time.perf_counter() - t_c, 3)
out["process_s"] = round(time.perf_counter() - t0, 3)
print("RESULT " + json.dumps(out), flush=True)
"""


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "n": len(values)}


def main():
    from judge_bench import write
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--no-evaluate", action="store_true", help="only start the judge")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    runs = []
    for i in range(a.starts):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", ONE_START, a.backend, "0" if a.no_evaluate else "1"],
                           capture_output=True, text=True, cwd=ROOT, timeout=600)
        wall = time.perf_counter() - t0
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"start {i} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        r = json.loads(line[len("RESULT "):])
        r["command_s"] = round(wall, 3)
        runs.append(r)
        print(json.dumps(r), flush=True)
    rows = []
    for role in ("ref", "cand"):
        phases = sorted({k for r in runs for k in (r[role] or {})})
        rows.append({"worker": role, "phases_s": {k: spread([r[role][k] for r in runs if k in r[role]]) for k in phases}})
    rows.append({"judge": "process", **{k: spread([r[k] for r in runs]) for k in ("import_s", "judge_s", "warm_s",
                                                                              "close_s", "process_s", "command_s")}})
    if not a.no_evaluate:
        rows.append({"judge": "evaluations", "problem_s": [r["problem_s"] for r in runs], "baselines_s": [r["baselines_s"] for r in runs],
                     "evaluate_s": [r["evaluate_s"] for r in runs], "status": [r["status"] for r in runs]})
    later = [r["command_s"] for r in runs[1:]] or [runs[0]["command_s"]]
    targets = [{"target": "a one-off judge in at most 3 s, command to result, baselines in the store (issue 41, "
                          "item 4; the starts after the first)" if not a.no_evaluate else
                          "a judge started in at most 3 s (issue 41, item 4; no evaluation)",
                "measured": round(statistics.median(later), 3), "met": statistics.median(later) <= 3.0}]
    write("start", rows, targets, Path(a.out), notes=f"backend {a.backend}; each start a new process (python -c)"
          + ("" if a.no_evaluate else "; each evaluates the softmax problem's Triton answer, the first computing its "
                                      "baselines into the results store"))


if __name__ == "__main__":
    main()
