"""bench/results/gpu_tests.json from a device run of the gpu-marked tests (their JUnit XML):

    # on the device (see bench/device/setup.sh for the carried wheels)
    python3 -m pytest -q -m gpu tests --junitxml=$OUT/gpu_tests_all.xml
    # here, with the file fetched from the device
    python bench/gpu_tests_json.py gpu_tests_all.xml --device "NVIDIA H100 80GB HBM3" --date 2026-11-24 \
        --command "python3 -m pytest -q -m gpu tests ..." [--notes "..."]

One row per test case (passed, failed, error or skipped, with its seconds); the target is that every
gpu-marked test that ran passed. Several JUnit files are several runs, in order (each row names its
`run`); a test that ran again in a later run counts by its latest outcome, and its earlier rows stay.
`--append` adds a later session's runs after the file's own.
"""
from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET  # the XML is our own pytest's output, not untrusted input
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rows_from_junit(path: Path) -> list[dict]:
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):   # a run cut by ^C (timeout -s INT) leaves an empty case: no test, no outcome
            continue
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        rows.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                     "seconds": round(float(case.get("time") or 0), 3)})
    return rows


def rows_from_log(path: Path) -> list[dict]:
    """From a `pytest -v` log (when the run was cut before pytest wrote its JUnit XML): one row per
    test line, its outcome as printed; a test whose line has no outcome was still running when the
    run was cut ("unfinished"). The log carries no per-test seconds (null)."""
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(tests/\S+\.py)::(\S+)(?: (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS))?", line)
        if not m:
            continue
        outcome = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                   "XFAIL": "skipped", "XPASS": "failed", None: "unfinished"}[m.group(3)]
        mod = m.group(1)[:-3].replace("/", ".")
        rows.append({"test": f"{mod}::{m.group(2)}", "outcome": outcome, "seconds": None})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("junit", type=Path, nargs="+",
                    help="one JUnit XML (or, for a run cut before pytest wrote one, its -v log: *.log) per run, "
                         "in the order they ran")
    ap.add_argument("--device", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--command", required=True, help="the exact command that ran on the device")
    ap.add_argument("--notes", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_tests.json")
    ap.add_argument("--append", action="store_true",
                    help="keep the runs already in --out and add these after them (a later session's reruns)")
    args = ap.parse_args()
    rows, first = [], 1
    old = json.loads(args.out.read_text()) if args.append and args.out.exists() else None
    if old is not None:
        rows = [dict(r, run=r.get("run", 1)) for r in old["rows"]]
        first = max(r["run"] for r in rows) + 1 if rows else 1
    for i, path in enumerate(args.junit, first):
        got = rows_from_log(path) if path.suffix == ".log" else rows_from_junit(path)
        rows += [dict(r, run=i) if len(args.junit) > 1 or old is not None else r for r in got]
    latest = {r["test"]: r for r in rows}
    ran = [r for r in latest.values() if r["outcome"] != "skipped"]
    passed = sum(r["outcome"] == "passed" for r in ran)
    unfinished = [r["test"] for r in ran if r["outcome"] == "unfinished"]
    if old is not None:     # the file says what ran before and what ran now
        args.command = f"{old['command']} || runs {first}-{first + len(args.junit) - 1} ({args.date}): {args.command}"
        args.notes = f"{old.get('notes', '')} || {args.notes}".strip(" |")
        if old["device"] != args.device:
            args.device = f"{old['device']} + {args.device}"
    doc = {"name": "gpu_tests", "device": args.device, "date": args.date, "command": args.command, "rows": rows,
           "targets": [{"target": "every gpu-marked test passes at HEAD", "measured": f"{passed}/{len(ran)}"
                        + (f"; unfinished when the run was cut: {unfinished}" if unfinished else ""),
                        "met": bool(ran) and passed == len(ran)}], "notes": args.notes}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["targets"]))


if __name__ == "__main__":
    main()
