"""`mkgym problems check` over the whole built-in suite at its real (GPU) sizes, recorded.

    python bench/problems_check.py [--backend gpu] [--out DIR] [--problems NAME ...]

Writes problems_check_<backend>.json: per problem whether it passed, the reasons if not, the
reference's own rounding against float64 as a share of the tolerance (the calibration), the
output shapes, and the time one forward and the whole check took. CI runs the same checks at
the CPU sizes (tests/test_curriculum.py); this is the one-off record for the GPU sizes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402
from megakernel_gym.curriculum import builtin_suite  # noqa: E402
from megakernel_gym.curriculum.check import check_problems  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--problems", nargs="*", default=None)
    args = ap.parse_args()
    suite = builtin_suite()
    problems = [suite.get(n) for n in args.problems] if args.problems else list(suite)
    rows = []

    def record(rep):   # the file is rewritten after each problem: a run cut short still leaves its record
        calib = next((c for c in rep.checks if c["name"] == "tolerance_calibrated"), {})
        rows.append({"problem": rep.problem, "level": suite.get(rep.problem).level, "ok": rep.ok,
                     "reasons": rep.reasons, "calibration_share_of_tolerance": calib.get("value"),
                     "calibration": calib.get("detail"), "checks_applied": sum(c["ok"] is not None for c in rep.checks),
                     "outputs": rep.outputs, "elapsed_s": rep.elapsed_s})
        print(f"{rep.summary()}  [{rep.elapsed_s}s; calibration {calib.get('value')}]", flush=True)
        passed = sum(r["ok"] for r in rows)
        write(f"check_{args.backend}", rows,
              [{"target": f"every built-in problem passes `mkgym problems check` on the {args.backend} "
                          f"backend ({'real GPU sizes' if args.backend == 'gpu' else 'CPU sizes'})",
                "measured": f"{passed}/{len(rows)} of {len(problems)}",
                "met": passed == len(rows) == len(problems)}],
              Path(args.out), prefix="problems_", quiet=True)

    check_problems(problems, backend=args.backend, strict=True, progress=False, on_report=record)


if __name__ == "__main__":
    main()
