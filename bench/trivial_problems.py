"""Which problems the judge refuses to serve because a kernel computing nothing would match their answer
(rewards/filters.trivial_answer: every output zero within the tolerance, or the same answer for another
draw of the inputs), over a whole suite at its real sizes:

    python bench/trivial_problems.py [--suite kernelbench] [--levels 1 2 3] [--backend gpu] [--deadline S]

Each problem's reference runs once, as a judge's first evaluation of it would (Judge.refusal). Writes
bench/results/trivial_problems.json: a row per problem (served or refused, the reason, seconds), rows
written as they come (a run stopped by a time limit keeps what it did). Targets: KernelBench's
level2/80_Gemm_Max_Subtract_GELU (zeros for any input: a zeros kernel scored correct before the gate,
red team 8) refused; every refused problem's reason names a trivial answer (not a crash or a size).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from megakernel_gym.curriculum.suite import load_suite  # noqa: E402
from megakernel_gym.rewards import Judge, ProblemError  # noqa: E402
from megakernel_gym.rewards.filters import TRIVIAL_WORDS  # noqa: E402

KNOWN_TRIVIAL = "level2/80_Gemm_Max_Subtract_GELU"
KNOWN_COPY = "level1/33_BatchNorm"     # eval mode at its initial statistics: its input (red team 17)


def targets(rows: list[dict], suite: str) -> list[dict]:
    refused = [r for r in rows if r["served"] is False]
    out = []
    if suite == "kernelbench":
        r80 = next((r for r in rows if r["problem"] == KNOWN_TRIVIAL), None)
        out.append({"target": f"{KNOWN_TRIVIAL} refused (its answer is zeros for any input)",
                    "measured": "not run" if r80 is None else ("refused" if r80["served"] is False else "served"),
                    "met": r80 is not None and r80["served"] is False})
        r33 = next((r for r in rows if r["problem"] == KNOWN_COPY), None)
        out.append({"target": f"{KNOWN_COPY} refused (at its initial running statistics it is its input)",
                    "measured": "not run" if r33 is None else ("refused" if r33["served"] is False else "served"),
                    "met": r33 is not None and r33["served"] is False})
    odd = [r["problem"] for r in refused if not any(w in (r["reason"] or "") for w in TRIVIAL_WORDS)]
    out.append({"target": "every problem refused as trivial names a trivial answer",
                "measured": f"{len(refused)} refused: " + "; ".join(f"{r['problem']}: {r['reason'][:120]}"
                                                                   for r in refused),
                "met": not odd})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="kernelbench")
    ap.add_argument("--levels", type=int, nargs="*", default=None)
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--deadline", type=float, default=None, help="stop taking new problems after this many s")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    suite = load_suite(a.suite)
    problems = [p for p in suite if a.levels is None or p.level in a.levels]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    doc = {"name": "trivial_problems", "device": "", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "command": "python " + " ".join(sys.argv), "rows": rows, "targets": []}
    t0 = time.perf_counter()
    from tqdm import tqdm   # the progress bar people already have
    with Judge(backend=a.backend, store=False, use_cache=False) as judge:
        judge.warm()
        doc["device"] = judge.device
        for p in tqdm(problems, desc="references", unit="problem", file=sys.stderr):
            if a.deadline is not None and time.perf_counter() - t0 > a.deadline:
                break
            t = time.perf_counter()
            try:
                why = judge.refusal(p)
                row = {"problem": p.name, "level": p.level, "served": why is None, "reason": why}
                if why is not None and not any(w in why for w in TRIVIAL_WORDS):
                    row["served"] = None     # unservable for another reason (too large for the backend)
            except ProblemError as e:
                row = {"problem": p.name, "level": p.level, "served": None, "reason": f"problem error: {str(e)[-300:]}"}
            row["seconds"] = round(time.perf_counter() - t, 3)
            rows.append(row)
            doc["targets"] = targets(rows, a.suite)
            (out / "trivial_problems.json").write_text(json.dumps(doc, indent=1))
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    doc["summary"] = {"problems": len(rows), "served": sum(r["served"] is True for r in rows),
                      "refused_trivial": sum(r["served"] is False for r in rows),
                      "other": sum(r["served"] is None for r in rows)}
    (out / "trivial_problems.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps({"summary": doc["summary"], "targets": doc["targets"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
