"""Production baselines (issue 43), on a GPU: for every built-in problem that names production kernels, each
kernel's check against the reference and its time, beside eager, CUDA-graph and torch.compile, and the shipped
reference kernels' speedup over the old best (the three PyTorch ways) and over the new best (all of them), in one
run.

    python bench/production_baselines.py [--problems gqa_decode ...] [--out DIR]
    python bench/production_baselines.py --merge A/production_baselines.json B/...   # halves run on two GPUs

Writes production_baselines.json (device, date, command; one row per problem: every baseline's time, or why it
does not count, and its shipped reference kernels' speedups).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import device_name, write  # noqa: E402
from megakernel_gym.curriculum import builtin_names, get_problem, reference_candidates  # noqa: E402
from megakernel_gym.rewards import Judge  # noqa: E402
from megakernel_gym.rewards.problem import BASELINES  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--problems", nargs="*", default=None, help="default: every built-in problem with PRODUCTION")
    ap.add_argument("--merge", nargs="*", default=None,
                    help="result files of runs over parts of the problems (one per GPU): one file, rows by problem")
    args = ap.parse_args()
    names = args.problems or [n for n in builtin_names() if get_problem(n).production]
    if args.merge:
        return merge([Path(f) for f in args.merge], names, Path(args.out))
    rows = []
    with Judge("gpu", store=Path(tempfile.mkdtemp()) / "r.sqlite", use_cache=False) as judge:
        for name in names:
            problem = get_problem(name)
            ready = judge.prepare(problem)      # reference, footprint and every baseline, production ones checked
            base = {k: {"median_ms": v.get("median_ms"), "p10_ms": v.get("p10_ms"), "p90_ms": v.get("p90_ms"),
                        **{x: v[x] for x in ("checked_seeds", "tol_used", "error", "skipped") if x in v}}
                    for k, v in (ready.get("baselines") or {}).items() if isinstance(v, dict)}
            old = {k: v["median_ms"] for k, v in base.items() if k in BASELINES and v.get("median_ms")}
            new = {k: v["median_ms"] for k, v in base.items() if v.get("median_ms")}
            row = {"problem": name, "production": problem.production, "baselines": base,
                   "old_best": min(old, key=old.get) if old else None, "new_best": min(new, key=new.get) if new else None,
                   "prepare_s": ready.get("seconds"), "references": []}
            print(f"{name:<26} old best {row['old_best']} {min(old.values(), default=0):.4f} ms, new best "
                  f"{row['new_best']} {min(new.values(), default=0):.4f} ms ({ready.get('seconds')} s)", flush=True)
            for k, v in base.items():
                if k.startswith("production:"):
                    print(f"    {k:<34} {v.get('median_ms') or 0:.4f} ms  "
                          f"{v.get('error') or v.get('skipped') or 'checked on %s seeds' % v.get('checked_seeds')}"
                          [:300], flush=True)
            for kind, cand in reference_candidates(name).items():   # the shipped kernels' speedups, old and new
                r = judge.evaluate(problem, cand)
                ms = (r.timing or {}).get("median_ms")
                ref = {"candidate": f"reference:{kind}", "status": r.status, "reason": r.reason[:300], "median_ms": ms,
                       "best_baseline": r.best_baseline,
                       "speedup_vs_old_best": round(min(old.values()) / ms, 4) if old and ms else None,
                       "speedup_vs_new_best": round(min(new.values()) / ms, 4) if new and ms else None}
                row["references"].append(ref)
                print(f"    reference:{kind:<8} {r.status:<10} {ms or 0:.4f} ms  x{ref['speedup_vs_old_best'] or 0:.3f} "
                      f"over the old best, x{ref['speedup_vs_new_best'] or 0:.3f} over the new ({r.best_baseline})",
                      flush=True)
            row["device"] = device_name()
            rows.append(row)
            write_rows(rows, names, Path(args.out), quiet=True)   # a run cut short keeps what it measured
    write_rows(rows, names, Path(args.out))


def merge(files, names, out: Path):
    """Parts measured in separate processes (say one per GPU of one host, or a later run of the problems an
    earlier one could not finish): each row keeps its own card and date, a problem in several files the
    last one's; the notes name the runs merged."""
    docs = [json.loads(f.read_text()) for f in files]
    latest = {r["problem"]: dict(r, device=r.get("device") or d["device"], measured=d["date"])
              for d in docs for r in d["rows"]}       # a problem measured again: the later file's row
    rows = [latest[k] for k in sorted(latest)]
    write_rows(rows, names, out, notes="merged from: " + " ; ".join(f"{d['command']} ({d['device']}, {d['date']})"
                                                                     for d in docs),
               extra={"device": " + ".join(sorted({d["device"] for d in docs})),    # the cards and dates measured,
                      "date": max(d["date"] for d in docs),                        # not this host's
                      "merged_on": datetime.datetime.now().isoformat(timespec="seconds")})


def write_rows(rows, names, out: Path, notes: str = "", quiet: bool = False, extra: dict | None = None):
    missing = sorted(set(names) - {r["problem"] for r in rows})
    problems_timed = sorted(r["problem"] for r in rows
                            if any(k.startswith("production:") and v.get("median_ms") for k, v in r["baselines"].items()))
    refs = [x for r in rows for x in r["references"]]
    write("production_baselines", rows, [
        {"target": "every problem with production baselines timed against at least one on this GPU",
         "measured": f"{len(problems_timed)}/{len(names)}: {problems_timed}", "met": len(problems_timed) == len(names)},
        {"target": "every shipped reference kernel correct",
         "measured": f"{sum(x['status'] == 'correct' for x in refs)}/{len(refs)}",
         "met": all(x["status"] == "correct" for x in refs)},
        {"target": "no problem left out", "measured": f"missing: {missing}", "met": not missing}],
        out, notes=notes, prefix="", quiet=quiet, extra=extra)


if __name__ == "__main__":
    main()
