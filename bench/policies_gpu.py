"""Level-5 policies measured on a GPU, each problem's schedules through one megakernel judge: sim first,
GPU to confirm (issue 16's target: the trained policy >= 1.3x over the default on held-out families).

    python bench/policies_gpu.py --make-plan runs/policies_plan.json [--policies heuristic,search,expert,lm]
                                 [--split heldout | --problem NAME ...]     # CPU: play each in the sim
    python bench/policies_gpu.py --plan runs/policies_plan.json [--out DIR] [--name NAME]   # GPU: measure
                                 [--only PROBLEM ...]      # one GPU's share; --merge RUN.json ... joins them

--make-plan plays each policy greedily (adding to the file's other policies and problems) in the sim env (MegaKernelEnv, backend sim, H100 constants) on
each problem and records the edit text the env took (every accepted action, in order) and the sim's
speedup over the default schedule. --plan measures those schedules: per problem one MegakernelJudge
(the default schedule, eager and CUDA-graph baselines timed once), then each policy's megakernel
checked on 3 seeds against the float32 truth and timed; the speedup is over the default schedule
measured in the same judge. Writes <name>.json (default policies_gpu) with per policy the geomean
over the held-out family problems.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402

HELDOUT_FAMILY_PROBLEMS = ("mk_qwen3_0p6b", "mk_qwen3_1p7b", "mk_mistral_window", "mk_mistral_window_batch2")


def make_plan(path: Path, policies: list[str], split: str | None, problems: list[str] | None) -> None:
    from megakernel_gym.compiler import predict
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.ir_exposure import apply_edits, render
    from megakernel_gym.policies.baselines import make_policy
    from megakernel_gym.policies.evaluate import select_problems
    from megakernel_gym.policies.export import played_schedule
    env = MegaKernelEnv(backend="sim", device="H100")
    names = select_problems(env, problems, split or ("heldout" if not problems else None), [5])
    plan: dict = json.loads(path.read_text()) if path.is_file() else {}     # other policies' entries stay
    for name in names:
        plan.setdefault(name, {})
        for pol in policies:
            t = time.perf_counter()
            ir0, taken, ir = played_schedule(env, make_policy(pol), name)
            text = "\n".join(taken)
            again = ir0
            for a in taken:
                again = apply_edits(again, a)
            assert render(again) == render(ir), f"{name} {pol}: the recorded actions do not rebuild the IR"
            sp = predict(ir0.plan(), "H100").latency_us / predict(ir.plan(), "H100").latency_us
            plan[name][pol] = {"actions": taken, "sim_speedup": round(sp, 4), "edit_lines": len(text.splitlines())}
            print(f"{name} {pol}: sim {sp:.3f}x, {len(text.splitlines())} lines, {time.perf_counter() - t:.1f} s",
                  file=sys.stderr, flush=True)
    env.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=1))


def measure(plan: dict, out: Path, name: str) -> None:
    import torch

    from families_gpu import problem_ir

    from megakernel_gym.curriculum import builtin_suite
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.rewards.megakernel import MegakernelJudge
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for prob, pols in plan.items():
        problem = builtin_suite().get(prob)
        mod, _, _, ir0 = problem_ir(prob, sms)
        with MegakernelJudge(mod.block, mod.config, ir0.plan(), timeout_s=600.0) as judge:
            for pol, rec in pols.items():
                t = time.perf_counter()
                ir = ir0
                for a in rec["actions"]:
                    ir = apply_edits(ir, a)
                try:
                    res = judge.evaluate(ir.plan(), dict(ir.impls), problem)
                    row = {"problem": prob, "policy": pol, "status": res.status, "correct": res.correct,
                           "speedup_over_default": (res.speedups or {}).get("default_schedule"),
                           "median_us": (res.timing or {}).get("median_us"), "baselines": res.baselines,
                           "seeds": res.seeds, "reason": res.reason[:300]}
                except Exception as e:  # noqa: BLE001 - one schedule's failure is a row
                    row = {"problem": prob, "policy": pol, "status": "bench_error", "correct": False,
                           "speedup_over_default": None, "reason": f"{type(e).__name__}: {e}"[:600]}
                row.update(sim_speedup=rec["sim_speedup"], edit_lines=rec["edit_lines"],
                           seconds=round(time.perf_counter() - t, 1))
                rows.append(row)
                print(f"{prob} {pol}: {row['status']} {row['speedup_over_default']} (sim {rec['sim_speedup']})",
                      flush=True)
    summarize(rows, out, name)


def summarize(rows: list[dict], out: Path, name: str, extra: dict | None = None) -> None:
    pols = sorted({r["policy"] for r in rows})
    fam = {p: [r for r in rows if r["policy"] == p and r["problem"] in HELDOUT_FAMILY_PROBLEMS] for p in pols}
    geo = {p: (math.exp(sum(math.log(r["speedup_over_default"]) for r in rs) / len(rs))
               if rs and all(r["correct"] and r["speedup_over_default"] for r in rs) else None)
           for p, rs in fam.items()}
    lm = geo.get("lm")
    targets = [{"target": "the trained policy (lm) >= 1.3x geomean over the default schedule on the held-out family "
                          "problems, measured on the GPU", "measured": round(lm, 4) if lm else None,
                "others": {p: round(v, 4) if v else None for p, v in geo.items()}, "met": bool(lm and lm >= 1.3)},
               {"target": "every measured schedule correct on 3 seeds",
                "measured": f"{sum(r['correct'] for r in rows)}/{len(rows)}", "met": all(r["correct"] for r in rows)}]
    write(name, rows, targets, out, prefix="",
          notes="each problem's schedules through one MegakernelJudge; speedups over the default schedule timed "
                "in the same judge; policies played in the sim (make-plan) and measured here", extra=extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-plan", type=Path, default=None)
    ap.add_argument("--plan", type=Path, default=None)
    ap.add_argument("--policies", default="heuristic,search,expert,lm")
    ap.add_argument("--split", default=None)
    ap.add_argument("--problem", action="append")
    ap.add_argument("--only", action="append", help="with --plan: measure just these problems")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--name", default="policies_gpu")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="RUN.json",
                    help="one <name>.json of these runs' rows (the problems split over GPUs with --only)")
    args = ap.parse_args()
    if args.merge:
        runs = [json.loads(p.read_text()) for p in args.merge]
        summarize([r for run in runs for r in run["rows"]], Path(args.out), args.name,
                  extra={"device": " + ".join(sorted({run["device"] for run in runs})),
                         "date": max(run["date"] for run in runs),
                         "command": " ; ".join(run["command"] for run in runs)})
    if args.make_plan:
        make_plan(args.make_plan, args.policies.split(","), args.split, args.problem)
    if args.plan:
        plan = json.loads(args.plan.read_text())
        if args.only:
            plan = {k: v for k, v in plan.items() if k in args.only}
        measure(plan, Path(args.out), args.name)


if __name__ == "__main__":
    main()
