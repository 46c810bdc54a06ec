"""The cost model as it is now, scored against every row the current kernel was timed in on one card (an H200 by
default; `--device-name H100` scores the H100's rows under its constants):
the adversary's searched schedules (sim_adversary*.json: worst searched speedup off and Spearman, the
issue-39 targets), the bisections of its climbs (sim_bisect.json: each edit set's time over its start),
the knob A/B files (ab_knobs_*.json: each build's time over the file's first) and the task probes'
plain runs (task_probe*.json: each schedule over the default), those three from the kernel as it
is (--since).
One command answers "is this change to costmodel.py better or worse, on everything we measured?":

    python bench/sim_score.py [--workers 2] [--sets adversary bisect ab] [--cache runs/sim_score]
                              [--variant NAME:FIELD=VALUE[,FIELD=VALUE] ...]

Nothing here touches a GPU: the measurements are the files'; the predictions are made now. The plans
are rebuilt from each row's edits (a pool of `workers`), pickled under `--cache` keyed by the row and
the source of everything that lowers a plan (the cost model's own files, MODEL_FILES, left out, so a
change to the model reuses them; about 25 MB a plan, some 10 GB for every row, git-ignored), and priced
afresh each run. A row's ratio is its time over its
group's reference (the expert, a bisection's start, an A/B file's first build), GPU and sim; a
*wrong sign* is a row the sim reads at least 1% faster than its reference where the GPU ran it at
least 1% slower, or the reverse: a reward with the wrong sign, the error a policy would learn.
Rows the sim cannot price (A/B builds with codegen knobs it does not model, such as maxnreg) are
left out and counted. Writes bench/results/sim_score.json. `--variant` scores other constants beside the
shipped ones in the same pass (each plan is read once, and a prediction after the first costs ~0.04 s),
side by side in <name>_variants.json: a grid of a constant costs about what one scoring does.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import pickle
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sim_adversary import (DISTINCT, SPEARMAN_TARGET, SPEEDUP_TOLERANCE, row_ir, score_all,  # noqa: E402
                           step_positions, target_ir)
from megakernel_gym.compiler.calibrate import spearman  # noqa: E402
from megakernel_gym.compiler.costmodel import costs_at, predict  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ADVERSARY = ("sim_adversary.json", "sim_adversary_s53b.json", "sim_adversary_s53.json", "sim_adversary_s52.json", "sim_adversary_s50.json", "sim_adversary_s49.json", "sim_adversary_s48.json", "sim_adversary_s47.json", "sim_adversary_light.json", "sim_adversary_candidate.json")
# The kernel as it is dates from the alignment fix of the dynamic shared memory (2b85624, 2026-11-30 12:40 on the
# device's clock): before it, a build's static variables could put every ring stage 16 bytes off a line (llama-1b's
# builds with an `ahead` cap ran 7% slower, every GPT-2 large build 1-2.5%), so older A/B files and bisections
# measured another kernel. --since takes them in.
ALIGNED = "2026-11-30T12:40"
SIM_KNOBS = ("distinct_ops",)    # emit_cuda knobs the sim prices; a build with any other is left out
SIGN = 0.01                      # a wrong sign: the sim and the GPU at least this far apart, either side of 1
MODEL_FILES = ("costmodel.py", "devices.py", "simloop.py", "trips.py", "codecost.py", "calibrate.py", "waits.py")    # the model and its fitting code: none lowers a plan
SETS = ("adversary", "bisect", "ab", "probe")
ADVERSARY_OF = {"H200": ADVERSARY, "H100": ("sim_adversary_h100.json",)}     # each card's searched schedules
CARD = ["H200"]                  # the card whose rows are scored (--device-name)
NOT_LOWERING = ("export.py",)    # files under the digest's folders that no lowering reads (a fix there kept no plan)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lowering_digest() -> str:
    """A digest of the source that lowers an edit text to a plan: the cache's key, with the cost model's
    own files left out so that a change to the model reuses the plans."""
    h = hashlib.sha256()
    for sub in ("megakernel_gym/compiler", "megakernel_gym/ir_exposure", "megakernel_gym/policies"):
        for p in sorted((ROOT / sub).rglob("*.py")):
            if p.name not in MODEL_FILES and p.name not in NOT_LOWERING:
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _ident(row: dict) -> dict:
    """What names a measured row's schedule (sim_adversary.row_ir)."""
    return {k: row.get(k) for k in ("target", "label", "start", "edits_from_start")}


# ---- the row sets: each row gets `build` (how to rebuild its plan), `group`, `ref` (its group's reference)

def _epoch(when: str) -> str:
    """The expert's epoch a row timed at `when` belongs to: the last time a lever joined it at or before then
    ("" before any): part of each build, so a row is priced with the expert it was timed with."""
    from megakernel_gym.policies.expert import LEVER_SINCE
    return max((d for d in LEVER_SINCE.values() if d <= when), default="")


def adversary_rows(name: str) -> list[dict]:
    doc = json.loads((RESULTS / name).read_text())
    sampled = (doc["sampled"]["n"], doc["sampled"]["seed"]) if doc.get("sampled") else ()
    rows = [r for r in doc["rows"] if r.get("measured") and r.get("correct")]
    for r in rows:
        r["build"] = ("row", _ident(r), doc["num_sms"], sampled, doc.get("positions", "seed"), _epoch(doc["date"]))
        r["group"] = f"{name}: {r['target']}"
    return rows


def bisect_rows(since: str) -> list[dict]:
    doc = json.loads((RESULTS / "sim_bisect.json").read_text())
    if CARD[0] not in doc.get("device", ""):
        return []
    runs = {r["run"]: r["date"] for r in doc.get("runs", []) if r["date"] >= since}
    rows = [r for r in doc["rows"] if r.get("measured") and r.get("correct") and r["run"] in runs]
    out = []
    for r in rows:
        r["build"] = ("row", _ident(r), 132, (), r["pos"], _epoch(runs[r["run"]]))
        head, _, tail = r["label"].rpartition(": ")
        r["group"] = f"sim_bisect run {r['run']}: {head}"
        r["label"] = tail
        out.append(r)
    return out


def _timed_files(pattern: str, since: str):
    """(file name, doc, model, {schedule label: its variant file}) of each result file in bench/results
    matching `pattern` timed on the card scored (CARD) from `since` on."""
    for f in sorted(glob.glob(str(RESULTS / pattern))):
        doc = json.loads(Path(f).read_text())
        if doc.get("date", "") < since or CARD[0] not in doc.get("device", ""):
            continue
        cmd = doc["command"]
        m = re.search(r"--model (\S+)", cmd)
        # --extra LABEL=FILE: a schedule of edits from a file under bench/ (bench/variants, bench/schedules)
        yield Path(f).name, doc, m.group(1) if m else "llama-1b", dict(re.findall(r"(\S+?)=(bench/\S+)", cmd))


def _build_row(group: str, model: str, files: dict, schedule: str, knobs: dict, median_us: float,
               correct: bool = True, date: str = "") -> dict:
    """A row of a file of builds: a schedule (the default, expert or tuned edits, or a variant file) built
    with codegen `knobs`, left out where the sim does not price a knob."""
    from megakernel_edits import NAMED_SCHEDULES
    if schedule not in NAMED_SCHEDULES and not files.get(schedule):
        raise SystemExit(f"{group}: its schedule {schedule!r} is neither a named schedule nor an --extra file "
                         "its command names (LABEL=bench/...)")
    return {"schedule": schedule, "knobs": knobs, "target": model, "label": f"{schedule} {json.dumps(knobs, sort_keys=True)}",
            "measured": {"median_us": median_us}, "correct": correct, "group": group,
            "skip": sorted(set(knobs) - set(SIM_KNOBS)), "build": ("ab", model, schedule, files.get(schedule), _epoch(date))}


def ab_rows(since: str) -> list[dict]:
    """Each build of each knob A/B file (ab_knobs_*.json)."""
    return [_build_row(name, model, files, r["schedule"], r["knobs"], r["median_us"], r.get("same_bits_as_defaults", True),
                       doc["date"])
            for name, doc, model, files in _timed_files("ab_knobs_*.json", since) for r in doc["rows"]]


def probe_rows(since: str) -> list[dict]:
    """The plain megakernel's time of each schedule a task probe built (task_probe*.json; not its probed run)."""
    return [_build_row(name, model, files, r["schedule"], r.get("codegen") or {}, r["megakernel"]["median_us"],
                       date=doc["date"])
            for name, doc, model, files in _timed_files("task_probe*.json", since) for r in doc["rows"]
            if not r.get("no_deps")]


def _edits(base, schedule: str, path: str | None, epoch: str | None = None) -> str:
    """A build file's schedule for `base`: its variant file, else the schedule it names (the expert of `epoch`)."""
    from megakernel_edits import named_edits, schedule_file
    return schedule_file(base, str(ROOT / path), epoch) if path else named_edits(base, schedule, epoch)


def _build_job(build: tuple) -> bytes:
    """The pickled plan a row's `build` names (in a pool worker; before any pricing, so the model's
    caches on the task graph are made afresh by each scoring)."""
    from megakernel_gym.ir_exposure import apply_edits
    if build[0] == "row":
        _, row, num_sms, sampled, _, epoch = build
        plan = row_ir(row, num_sms, sampled, epoch).plan()
    else:
        _, model, schedule, path, epoch = build
        _, base = target_ir(model, 132)
        plan = apply_edits(base, _edits(base, schedule, path, epoch)).plan()
    return pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)


def _cache_key(build: tuple, digest: str) -> str:
    ident = json.dumps([*build[:4], build[-1]], sort_keys=True)   # (a row's positions are priced, not built)
    return hashlib.sha256((digest + ident).encode()).hexdigest()[:24]


def plans_for(rows: list[dict], cache: Path, workers: int) -> None:
    """Puts each row's plan file (under `cache`) in r["plan_file"], building the missing ones."""
    digest = lowering_digest()
    cache.mkdir(parents=True, exist_ok=True)
    todo = {}
    for r in rows:
        if r.get("skip"):
            continue
        key = _cache_key(r["build"], digest)
        r["plan_file"] = cache / f"{key}.pkl"
        if not r["plan_file"].exists():
            todo.setdefault(key, (r["build"], r["plan_file"]))
    if not todo:
        return
    t0 = time.perf_counter()
    log(f"building {len(todo)} plans ({workers} workers; cached under {cache})")
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        jobs = list(todo.values())
        for i, (blob, (_, path)) in enumerate(zip(pool.map(_build_job, [b for b, _ in jobs], chunksize=1), jobs)):
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(blob)
            tmp.replace(path)
            if (i + 1) % 10 == 0:
                log(f"  {i + 1}/{len(jobs)} plans, {time.perf_counter() - t0:.0f} s")
    log(f"{len(todo)} plans built in {time.perf_counter() - t0:.0f} s")


def _price_job(job: tuple) -> list[float]:
    """A pickled plan's latency under each of `specs` (DeviceSpecs: the model as it is now, then any
    variants), in a pool worker. The plan is read once: its lowering's caches are built on the first
    prediction and serve the rest (they hold nothing of the constants)."""
    path, target, pos, specs, distinct_ops = job
    plan = pickle.loads(Path(path).read_bytes())
    positions = pos if isinstance(pos, list) else step_positions(target, pos)
    costs = costs_at(plan, positions)
    return [predict(plan, spec, costs=costs, distinct_ops=distinct_ops).latency_us for spec in specs]


def price(rows: list[dict], specs: dict, workers: int) -> None:
    """Each row's predicted_us under the model as it is now, at the positions it was timed at, and
    predicted_by: its prediction under each of `specs` (name -> DeviceSpec; the first is the model's)."""
    todo = [r for r in rows if not r.get("skip")]
    names, values = list(specs), list(specs.values())
    jobs = [(str(r["plan_file"]), r["target"], r["build"][4] if r["build"][0] == "row" else "seed", values,
             r.get("knobs", {}).get("distinct_ops", "")) for r in todo]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for r, us in zip(todo, pool.map(_price_job, jobs, chunksize=1)):
            r["predicted_by"] = dict(zip(names, us))
            r["predicted_us"] = us[0]
    log(f"{len(todo)} plans priced in {time.perf_counter() - t0:.0f} s ({len(specs)} sets of constants)")


def variant_specs(device: str, variants: list[str]) -> dict:
    """name -> DeviceSpec: the device's constants as shipped ("shipped"), then each `variants` entry
    NAME:FIELD=VALUE[,FIELD=VALUE...] (those constants with the fields replaced). A field the spec lacks
    or a value that is not a number is a clear error naming the entry."""
    from dataclasses import fields, replace

    from megakernel_gym.compiler.costmodel import DEVICES
    base = DEVICES[device]
    known = {f.name for f in fields(base)} - {"name"}
    out = {"shipped": base}
    for v in variants:
        name, _, spec = v.partition(":")
        if not name or not spec or name in out:
            raise SystemExit(f"--variant {v!r}: write NAME:FIELD=VALUE[,FIELD=VALUE...] with a new NAME")
        kw = {}
        for item in spec.split(","):
            field, _, value = item.partition("=")
            if field not in known:
                raise SystemExit(f"--variant {v!r}: {field!r} is not a DeviceSpec field (one of {', '.join(sorted(known))})")
            try:
                kw[field] = float(value)
            except ValueError:
                raise SystemExit(f"--variant {v!r}: {field}={value!r} is not a number") from None
        out[name] = replace(base, **kw)
    return out


# ---- scores

def ratio_scores(rows: list[dict], ref_of) -> dict:
    """Per group: each row's time over its reference's, sim / GPU; the error of the sim's ratio against
    the GPU's (rms, worst), Spearman over the group, and the wrong signs."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if not r.get("skip"):
            groups.setdefault(r["group"], []).append(r)
    out, errs, wrong = {}, [], []
    for g, rs in groups.items():
        ref = ref_of(rs)
        pts = []
        for r in rs:
            if r is ref:
                continue
            sim = ref["predicted_us"] / r["predicted_us"]        # speedup over the reference, > 1 faster
            gpu = ref["measured"]["median_us"] / r["measured"]["median_us"]
            e = sim / gpu - 1
            pts.append({"label": r["label"], "sim": round(sim, 4), "gpu": round(gpu, 4), "err": round(e, 4)})
            errs.append(e)
            if (sim >= 1 + SIGN and gpu <= 1 - SIGN) or (sim <= 1 - SIGN and gpu >= 1 + SIGN):
                wrong.append({"group": g, **pts[-1]})
        rho = (spearman([r["predicted_us"] for r in rs], [r["measured"]["median_us"] for r in rs])
               if len(rs) >= 3 else None)
        out[g] = {"rows": pts, "rms": round(math.sqrt(sum(p["err"] ** 2 for p in pts) / len(pts)), 4) if pts else None,
                  "worst": max((abs(p["err"]) for p in pts), default=None),
                  "spearman": None if rho is None or math.isnan(rho) else round(rho, 3)}
    return {"groups": out, "rms": round(math.sqrt(sum(e * e for e in errs) / len(errs)), 4) if errs else None,
            "rows": len(errs), "wrong_sign": wrong}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--adversary", nargs="*", default=None,
                    help="sim_adversary files in bench/results (default: the card's, ADVERSARY_OF)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default=str(ROOT / "runs" / "sim_score"), help="pickled plans (built once per lowering)")
    ap.add_argument("--device-name", default="H200", choices=sorted(ADVERSARY_OF),
                    help="the card whose rows are scored, under its constants")
    ap.add_argument("--since", default=ALIGNED,
                    help=f"A/B files and bisections measured from this date on (default {ALIGNED}: the kernel as it is)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", default="sim_score", help="the result file's name (sim_score: the shipped model's)")
    ap.add_argument("--variant", nargs="*", default=[], metavar="NAME:FIELD=VALUE[,FIELD=VALUE]",
                    help="also score the model with these constants changed (each plan is read once and priced "
                         "under every set); the summaries side by side go to <name>_variants.json")
    ap.add_argument("--dump", metavar="PATH", help="also write every row's measured time and its prediction under "
                    "each set of constants (JSON, by row set): to take a grid apart row by row")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cache = Path(args.cache)
    specs = variant_specs(args.device_name, args.variant)
    CARD[0] = args.device_name
    if args.adversary is None:
        args.adversary = list(ADVERSARY_OF[args.device_name])
    rows_of = {}                     # each row set's rows, built and priced once under every spec
    if "adversary" in args.sets:
        for name in args.adversary:
            if not (RESULTS / name).exists():
                log(f"{name}: not in bench/results, skipped")
                continue
            if CARD[0] not in json.loads((RESULTS / name).read_text()).get("device", ""):
                log(f"{name}: not timed on an {CARD[0]}, skipped")
                continue
            rows_of[name] = adversary_rows(name)
    for which, of in (("bisect", bisect_rows), ("ab", ab_rows), ("probe", probe_rows)):
        if which in args.sets:
            rows_of[which] = of(args.since)
    for rows in rows_of.values():
        plans_for(rows, cache, args.workers)
        price(rows, specs, args.workers)
    docs = {v: score(rows_of, v, args) for v in specs}
    notes = (f"targets: searched speedup within {SPEEDUP_TOLERANCE:.0%}, Spearman >= {SPEARMAN_TARGET} over points "
             f"{DISTINCT:.0%} apart (sim_adversary.score); wrong sign: sim and GPU {SIGN:.0%} or more apart "
             f"either side of the reference; {time.perf_counter() - t0:.0f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = dict(docs["shipped"], notes=notes)
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["summary"], indent=1))
    if args.variant:
        grid = {"name": f"{args.name}_variants", "device": doc["device"], "date": doc["date"], "command": doc["command"],
                "variants": {v: {"constants": _changed(specs["shipped"], specs[v]),
                                 "summary": d["summary"], "adversary": d.get("adversary")} for v, d in docs.items()},
                "notes": notes}
        (out / f"{args.name}_variants.json").write_text(json.dumps(grid, indent=1))
        for v, d in docs.items():
            print(f"{v:24s} " + "  ".join(f"{k} {x}" for k, x in d["summary"].items()))
    if args.dump:
        write_dump(Path(args.dump), specs, rows_of)
        log(f"every row's predictions: {args.dump}")


DUMPED = ("group", "target", "label", "start", "correct", "measured", "predicted_by", "skip")


def write_dump(path: Path, specs: dict, rows_of: dict) -> None:
    """--dump: each row set's rows with what names them, their GPU time and their prediction under every
    set of constants (predicted_by), and each set's changed constants; enough to score any set again
    (sim_adversary.score_all, ratio_scores) row by row without a plan."""
    path.write_text(json.dumps(
        {"variants": {v: _changed(specs["shipped"], specs[v]) for v in specs},
         "rows": {s: [{k: r[k] for k in DUMPED if k in r} for r in rows] for s, rows in rows_of.items()}}))


def _changed(a, b) -> dict:
    """The fields in which DeviceSpec b differs from a, with b's values."""
    from dataclasses import fields
    return {f.name: getattr(b, f.name) for f in fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def score(rows_of: dict, variant: str, args) -> dict:
    """The scores of every row set under one set of constants (each row's predicted_by[variant])."""
    doc = {"name": args.name, "device": f"the rows' (NVIDIA {args.device_name}); predicted on this CPU at {args.device_name}",
           "since": args.since, "variant": variant,
           "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": "python " + " ".join(sys.argv)}
    summary = {}
    for rows in rows_of.values():          # every scorer below reads a row's predicted_us
        for r in rows:
            if not r.get("skip"):
                r["predicted_us"] = r["predicted_by"][variant]
    adversaries = [n for n in rows_of if n not in SETS]
    if adversaries:
        doc["adversary"] = {}
        met = total = 0
        for name in adversaries:
            rows = rows_of[name]
            if variant == "shipped":
                log(f"-- {name}")
            targets = score_all(rows, log_them=variant == "shipped")
            per = [t for t in targets if not t["target"].startswith("all targets") and "correct" not in t["target"]]
            met += sum(t["met"] for t in per)
            total += len(per)
            doc["adversary"][name] = [{k: t[k] for k in ("target", "measured", "met")} for t in per]
            doc.setdefault("adversary_rows", {})[name] = [
                {k: r.get(k) for k in ("target", "label", "sim_speedup_vs_expert", "gpu_speedup_vs_expert", "sim_over_gpu")}
                for r in rows]
        summary["adversary targets met"] = f"{met}/{total}"
    for which, ref_of in (
            ("bisect", lambda rs: next((r for r in rs if r["label"] == "start"), rs[0])),
            ("ab", lambda rs: rs[0]),
            ("probe", lambda rs: next((r for r in rs if r["schedule"] == "default"), rs[0]))):
        if which not in rows_of:
            continue
        rows = rows_of[which]
        s = ratio_scores(rows, ref_of)
        s["left_out"] = sorted({f"{r['group']}: {r['label']}" for r in rows if r.get("skip")})
        doc[which] = s
        summary[f"{which} rms"] = s["rms"]
        summary[f"{which} wrong signs"] = len(s["wrong_sign"])
        log(f"-- {variant} {which}: {s['rows']} rows, rms {s['rms']}, wrong signs {len(s['wrong_sign'])}")
        if variant == "shipped":
            for w in s["wrong_sign"]:
                log(f"   wrong sign {w['group']}: {w['label']}: sim {w['sim']} GPU {w['gpu']}")
    doc["summary"] = summary
    return doc


if __name__ == "__main__":
    main()
