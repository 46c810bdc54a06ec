"""The judge against every exploit family and every honest candidate of the team's own, on one backend.

    python bench/judge_redteam.py [--backend cpu|gpu] [--sets adversarial,twins,...] [--no-overhead]

Candidates: tests/adversarial/*.py (one exploit family each, with the verdict it must get),
tests/adversarial/honest/*.py (the honest neighbours of the rules that refuse them), the older corpora
tests/corpus/adversarial and tests/corpus/honest (+ legit), and on the gpu backend tests/corpus/honest_gpu.
Each row: the family, the verdict required, the verdict given, whether it held. Targets: every exploit
blocked with the required verdict, every honest candidate correct, and the guard's cost to time to reward
(the honest corpus judged with the run-time guard on and off, alternating, in this run) within 10%.

Writes bench/results/judge_redteam.json, one section per backend (a run on one backend keeps the other's).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import problem_for, read_expectation  # noqa: E402  (the corpora's header format)
from test_adversarial import header as adversarial_header, verdict_ok  # noqa: E402

from megakernel_gym.rewards import Candidate, Judge  # noqa: E402

OUT = ROOT / "bench" / "results" / "judge_redteam.json"


SETS = {   # name: (kind, folder, glob)
    "adversarial": ("exploit", "tests/adversarial", "*.py"),
    "corpus": ("exploit", "tests/corpus/adversarial", "*.py"),
    "twins": ("honest", "tests/adversarial/honest", "*.py"),
    "honest": ("honest", "tests/corpus/honest", "*"),
    "legit": ("honest", "tests/corpus/legit", "*.py"),
    "honest_gpu": ("honest", "tests/corpus/honest_gpu", "*"),
}


def expectation(kind: str, path: Path, backend: str) -> tuple[str, dict]:
    """The verdict a correct judge must give (tests/test_adversarial.py's header format, or the older
    corpora's `# expect: STATUS DETAIL`), and the file's header."""
    if kind == "honest":
        return "correct", {}
    if path.parent.name == "adversarial" and path.parent.parent.name == "tests":
        h = adversarial_header(path)
        return (h.get("expect-gpu", h["expect"]) if backend == "gpu" else h["expect"]), h
    exp = read_expectation(path)
    return f"{exp['status']} {exp['detail'] or ''}".strip(), {"problem": exp["problem"]}


def run(backend: str, sets: list[str], overhead: bool) -> dict:
    rows = []
    import tempfile
    # a store of this run's own: each problem's baselines are measured once (verdicts are never served from it)
    store = Path(tempfile.mkdtemp(prefix="redteam-")) / "results.sqlite"
    with Judge(backend, store=store, use_cache=False, timeout_s=30 if backend == "gpu" else 120) as judge, \
            Judge(backend, store=store, use_cache=False, timeout_s=5) as short:
        judge.warm()
        for name in sets:
            kind, folder, pattern = SETS[name]
            for path in sorted((ROOT / folder).glob(pattern)):
                if path.suffix not in (".py", ".md"):
                    continue
                expect, h = expectation(kind, path, backend)
                if "timeout" in h and backend == "gpu":
                    continue   # a hang costs the judge's whole timeout; the cpu run covers those families
                problem = problem_for({"problem": h["problem"]} if h else read_expectation(path))
                t0 = time.perf_counter()
                res = (short if "timeout" in h else judge).evaluate(problem, Candidate(path.read_text(), str(path)))
                # an exploit must not score correct, unless its header says correct is right here (a cheat
                # that only the gpu backend's timing runs, or a judge-memory check)
                ok = verdict_ok(res, expect) and (kind == "honest" or expect.split()[0] == "correct"
                                                  or not res.correct)
                rows.append({"kind": kind, "set": name, "file": str(path.relative_to(ROOT)),
                             "family": h.get("family", path.stem), "required": expect,
                             "given": f"{res.status} {','.join(sorted({f.rule for f in res.flags})) or res.category or ''}".strip(),
                             "held": ok, "known_hole": h.get("hole-gpu" if backend == "gpu" else "hole"),
                             "elapsed_s": round(time.perf_counter() - t0, 3), "reason": (res.reason or "")[:300]})
                print(f"{'ok  ' if ok else 'MISS'} {kind:7s} {path.name:48s} {rows[-1]['given']:32s} "
                      f"{rows[-1]['elapsed_s']:6.2f}s", flush=True)
    section = {"sets": sets, "rows": rows}
    exploits = [r for r in rows if r["kind"] == "exploit"]
    honest = [r for r in rows if r["kind"] == "honest"]
    section["summary"] = {"exploits": len(exploits), "blocked": sum(r["held"] for r in exploits),
                          "families": len({r["family"] for r in exploits}),
                          "honest": len(honest), "honest_correct": sum(r["held"] for r in honest)}
    targets = [{"target": "every exploit blocked with its required verdict",
                "measured": f"{section['summary']['blocked']}/{len(exploits)}",
                "met": all(r["held"] for r in exploits)},
               {"target": "no honest candidate lost", "measured": f"{section['summary']['honest_correct']}/{len(honest)}",
                "met": all(r["held"] for r in honest)}]
    if overhead:
        section["guard_overhead"] = guard_overhead(backend)
        ratio = section["guard_overhead"]["ratio_median"]
        targets.append({"target": "time to reward with the guard within 10% of without", "measured": ratio,
                        "met": ratio is not None and ratio <= 1.10})
    section["targets"] = targets
    return section


def guard_overhead(backend: str, rounds: int = 2) -> dict:
    """The honest corpus judged with the run-time guard on and off, alternating per candidate, in this run:
    the median of per-candidate time-to-reward ratios (on / off)."""
    paths = [p for p in sorted((ROOT / "tests/corpus/honest").glob("*.py"))][:12]
    on_t, off_t = [], []
    with Judge(backend, store=False, use_cache=False) as on, \
            Judge(backend, store=False, use_cache=False, python_guard=False) as off:
        on.warm()
        off.warm()
        for _ in range(rounds):
            for p in paths:
                exp = read_expectation(p)
                for judge, bucket in ((on, on_t), (off, off_t)):
                    t0 = time.perf_counter()
                    r = judge.evaluate(problem_for(exp), Candidate(exp["source"], str(p)))
                    bucket.append(time.perf_counter() - t0 if r.status == "correct" else float("nan"))
    ratios = [a / b for a, b in zip(on_t, off_t) if a == a and b == b and b > 0]
    return {"candidates": len(paths), "rounds": rounds, "on_median_s": round(statistics.median(on_t), 3),
            "off_median_s": round(statistics.median(off_t), 3),
            "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
            "ratio_p90": round(sorted(ratios)[int(0.9 * (len(ratios) - 1))], 3) if ratios else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--sets", default=",".join(n for n in SETS if n != "honest_gpu"),
                    help=f"comma-separated, of: {', '.join(SETS)} (default: all but honest_gpu)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the guard on/off time-to-reward comparison")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    from bench.judge_bench import device_name
    sets = [x for x in a.sets.split(",") if x]
    unknown = [x for x in sets if x not in SETS]
    if unknown:
        ap.error(f"unknown set(s) {', '.join(unknown)}; use: {', '.join(SETS)}")
    section = run(a.backend, sets, not a.no_overhead)
    section.update(device=device_name(),
                   date=time.strftime("%Y-%m-%dT%H:%M:%S"), command="python " + " ".join(sys.argv))
    doc = json.loads(a.out.read_text()) if a.out.exists() else {"name": "judge_redteam"}
    doc[a.backend] = section
    doc.update(device=section["device"], date=section["date"], command=section["command"])   # the latest run's
    doc["rows"] = [dict(r, backend=b) for b in ("cpu", "gpu") if b in doc for r in doc[b]["rows"]]
    doc["targets"] = [dict(t, backend=b) for b in ("cpu", "gpu") if b in doc for t in doc[b]["targets"]]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"summary": section["summary"], "targets": section["targets"]}, indent=1))


if __name__ == "__main__":
    main()
