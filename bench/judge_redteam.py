"""The judge against every exploit family and every honest candidate of the team's own, on one backend.

    python bench/judge_redteam.py [--backend cpu|gpu] [--sets adversarial,twins,...] [--no-overhead]
    python bench/judge_redteam.py --backend gpu --shard 0/4 --out /tmp/s0.json   # one of 4 processes at once
    python bench/judge_redteam.py --backend gpu --merge /tmp/s*.json [--overhead]  # into the result file

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


def run(backend: str, sets: list[str], overhead: bool, shard: tuple[int, int] = (0, 1),
        partial: Path | None = None, skip: frozenset = frozenset()) -> dict:
    """Judge the sets' candidates (this shard's); with `partial`, the rows so far are written there after each."""
    rows = []
    index = -1
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
                index += 1
                if index % shard[1] != shard[0] or str(path.relative_to(ROOT)) in skip:
                    continue   # another shard's (processes judging side by side on one GPU)
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
                if partial is not None:
                    partial.write_text(json.dumps({"sets": sets, "rows": rows, "shard": f"{shard[0]}/{shard[1]}",
                                                   "partial": True, "command": "python " + " ".join(sys.argv),
                                                   "device": backend, "date": time.strftime("%Y-%m-%dT%H:%M:%S")}))
                print(f"{'ok  ' if ok else 'MISS'} {kind:7s} {path.name:48s} {rows[-1]['given']:32s} "
                      f"{rows[-1]['elapsed_s']:6.2f}s", flush=True)
    section = summarize({"sets": sets, "rows": rows, "shard": f"{shard[0]}/{shard[1]}"})
    if overhead:
        add_overhead(section, guard_overhead(backend))
    return section


def summarize(section: dict) -> dict:
    """The summary and targets of a section's rows."""
    rows = section["rows"]
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
    section["targets"] = targets
    return section


def add_overhead(section: dict, overhead: dict) -> None:
    section["guard_overhead"] = overhead
    ratio = overhead["ratio_median"]
    section["targets"].append({"target": "time to reward with the guard within 10% of without", "measured": ratio,
                               "met": ratio is not None and ratio <= 1.10})


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
    ap.add_argument("--shard", default="0/1", metavar="K/N",
                    help="judge only every N-th candidate from the K-th (run N processes at once, then --merge); "
                         "writes this shard's section alone to --out")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="SHARD_JSON",
                    help="combine shard files written by --shard into --out's section for --backend")
    ap.add_argument("--skip", nargs="+", type=Path, default=[], metavar="SHARD_JSON",
                    help="leave out the candidates that these shard files already judged (to resume a cut run)")
    ap.add_argument("--overhead", action="store_true", help="with --merge: also run the guard on/off comparison")
    a = ap.parse_args()
    from bench.judge_bench import device_name
    sets = [x for x in a.sets.split(",") if x]
    unknown = [x for x in sets if x not in SETS]
    if unknown:
        ap.error(f"unknown set(s) {', '.join(unknown)}; use: {', '.join(SETS)}")
    try:
        k, n = (int(v) for v in a.shard.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        ap.error(f"--shard takes K/N with 0 <= K < N, not {a.shard!r}")
    if a.merge:
        parts = [json.loads(f.read_text()) for f in a.merge]
        section = summarize({"sets": sorted({s for p in parts for s in p["sets"]}),
                             "rows": sorted((r for p in parts for r in p["rows"]), key=lambda r: (r["set"], r["file"])),
                             "shards": len(parts), "commands": [p["command"] for p in parts]})
        full = [p for p in parts if not p.get("partial")]
        section.update(device=full[0]["device"] if full else device_name(), date=max(p["date"] for p in parts),
                       cut_shards=[p["shard"] for p in parts if p.get("partial")])   # cut by a time limit; later parts judged the rest
        if a.overhead:
            add_overhead(section, guard_overhead(a.backend))
        section["command"] = "python " + " ".join(sys.argv)
    else:
        shard_mode = n > 1 or bool(a.skip)   # a part of a run, merged later
        section = run(a.backend, sets, not a.no_overhead and not shard_mode, (k, n), a.out if shard_mode else None,
                      frozenset(r["file"] for f in a.skip for r in json.loads(f.read_text())["rows"]))
        section.update(device=device_name(),
                       date=time.strftime("%Y-%m-%dT%H:%M:%S"), command="python " + " ".join(sys.argv))
        if shard_mode:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(section, indent=1))
            print(json.dumps({"summary": section["summary"]}))
            return
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
