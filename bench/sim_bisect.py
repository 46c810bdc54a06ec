"""Which kind of edit the sim misprices (issue 39, item 2): a schedule the adversary found that the sim
calls fast and the GPU does not, taken apart by edit verb and measured piece by piece in one run.

    python bench/sim_bisect.py [--runs bench/results/sim_adversary.json] [--pick TARGET=LABEL ...] [--worst 3]
                               [--with VERB ...] [--after LABEL] [--iters 20] [--rounds 5] [--sim-only] [--out DIR]
    python bench/sim_bisect.py --merge RUN1.json RUN2.json ...   # the rows of several runs in one file

For each picked row of a sim_adversary run (`--pick`, else the `--worst` searched rows whose sim speedup
over the expert is furthest above the GPU's): its start (the default or the expert), the whole climb, and
per verb its edits ("tile", "assign", "inflight", ...) the climb with that verb's edits left out and the
start with only them, each where the edit language still takes it. All are compiled in a pool, checked
against the float32 truth and timed in alternating rounds (sim_adversary.measure_target). Per variant: the
sim's and the GPU's time over the start's; a verb whose edits move the sim and the GPU apart is where the
cost model is blind. `--sim-only` prints the variants' predictions on the CPU. Writes sim_bisect.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sim_adversary import compile_job, log, measure_target, target_ir  # noqa: E402

from megakernel_gym.compiler.costmodel import DEVICES, predict  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits  # noqa: E402
from megakernel_gym.ir_exposure.edits import EditError  # noqa: E402
from megakernel_gym.ir_exposure.ir import IRError  # noqa: E402


def verb(edit: str) -> str:
    return edit.split(None, 1)[0] if edit.strip() else ""


def variants(target: str, num_sms: int, row: dict, pair_with: tuple = (), prefix: tuple = ()) -> list[tuple]:
    """(label, edit text from the default, IR, start, edits from the start) for the row's start, the whole
    climb, and per verb the climb without that verb's edits and the start with only them (those the edit
    language refuses as a script are left out, logged). Per verb W of `pair_with` and each other verb V,
    also the start with only V's and W's edits (in the climb's order): where W's edits cost the GPU more
    beside the climb than alone, the pair that does it. `prefix`: the climb's first edits (an earlier row
    of the same climb, `--after`), taken as part of the start, so that only the edits after them are
    taken apart; every variant's edits_from_start still counts from the default or the expert."""
    from megakernel_gym.policies.expert import expert_edits
    _, base = target_ir(target, num_sms)
    prefix = list(prefix)   # (after_prefix checked that it begins the row's edits)
    start_text = "\n".join(([expert_edits(base)] if row["start"] == "expert" else []) + prefix)
    start = apply_edits(base, start_text) if start_text else base
    path = list(row["edits_from_start"][len(prefix):])
    verbs = sorted({verb(e) for e in path} - {""})
    picks = [("whole", path)]
    for v in verbs:
        picks += [(f"without {v}", [e for e in path if verb(e) != v]), (f"only {v}", [e for e in path if verb(e) == v])]
    for w in pair_with:
        if w not in verbs:
            raise SystemExit(f"--with {w}: the climb has no {w!r} edit (its verbs: {', '.join(verbs)})")
        picks += [(f"only {v} and {w}", [e for e in path if verb(e) in (v, w)]) for v in verbs if v != w]
    name = f"{row['label']} ({target})" + (f" after its first {len(prefix)} edits" if prefix else "")
    out, seen = [(f"{name}: start", start_text, start, row["start"], prefix)], {start.text}
    for label, edits in picks:
        try:
            ir = apply_edits(start, "\n".join(edits)) if edits else start
        except (EditError, IRError) as e:
            log(f"{name}: {label} refused ({str(e)[:140]})")
            continue
        if ir.text in seen:
            continue
        seen.add(ir.text)
        text = "\n".join(([start_text] if start_text else []) + edits)
        out.append((f"{name}: {label}", text, ir, row["start"], prefix + edits))
    return out


def picked_rows(doc: dict, picks: list[str], worst: int) -> list[dict]:
    rows = doc["rows"]
    if picks:
        want = [tuple(p.split("=", 1)) for p in picks]
        got = [r for t, lab in want for r in rows if r["target"] == t and r["label"] == lab]
        if len(got) != len(want):
            raise SystemExit(f"--pick: some of {picks} name no row of the run")
        return got
    searched = [r for r in rows if r.get("sim_over_gpu") and r["label"] not in ("default", "expert")
                and r.get("start") in ("default", "expert") and r.get("edits_from_start")]
    return sorted(searched, key=lambda r: -r["sim_over_gpu"])[:worst]


def after_prefix(doc: dict, row: dict, label: str | None) -> tuple:
    """The edits of the row of `row`'s target labelled `label` (--after), which must begin `row`'s; ()
    without one."""
    if label is None:
        return ()
    got = [r for r in doc["rows"] if r["target"] == row["target"] and r["label"] == label]
    if not got:
        raise SystemExit(f"--after {label!r}: no row of {row['target']} has that label")
    prefix = list(got[0].get("edits_from_start") or [])
    if got[0].get("start") != row.get("start") or list(row["edits_from_start"][:len(prefix)]) != prefix:
        raise SystemExit(f"--after {label!r}: its edits do not begin {row['label']!r}'s (from the same start)")
    return tuple(prefix)


def summarize(rows: list[dict]) -> None:
    """Per variant, sim and GPU time over its start's (in place: sim_vs_start, gpu_vs_start, sim_over_gpu)."""
    starts = {r["label"].rsplit(": ", 1)[0]: r for r in rows if r["label"].endswith(": start")}
    for r in rows:
        s = starts[r["label"].rsplit(": ", 1)[0]]
        r["sim_vs_start"] = round(r["predicted_us"] / s["predicted_us"], 4)
        m, sm = r.get("measured", {}).get("median_us"), s.get("measured", {}).get("median_us")
        if m and sm:
            r["gpu_vs_start"] = round(m / sm, 4)
            r["gpu_over_sim"] = round(r["gpu_vs_start"] / r["sim_vs_start"], 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=str(ROOT / "bench" / "results" / "sim_adversary.json"))
    ap.add_argument("--pick", nargs="*", default=[], metavar="TARGET=LABEL")
    ap.add_argument("--worst", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--with", dest="pair_with", nargs="*", default=[], metavar="VERB",
                    help="also the start with only VERB's edits and each other verb's (pairs: which other verb "
                         "makes VERB's edits cost more than alone)")
    ap.add_argument("--after", default=None, metavar="LABEL",
                    help="take apart only the edits past another row of the same target whose edits begin the "
                         "picked row's (say 'climb 4 from default after 33%%': where the climb's last two thirds "
                         "move the sim and the GPU apart)")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--merge", nargs="+", default=None, metavar="RUN.json",
                    help="write one sim_bisect.json of these runs' rows (each row keeps its run's number)")
    a = ap.parse_args()
    if a.merge:
        return merge([Path(p) for p in a.merge], Path(a.out))
    t_start = time.perf_counter()
    doc = json.loads(Path(a.runs).read_text())
    import torch
    gpu = torch.cuda.is_available() and not a.sim_only
    device = next((k for k in DEVICES if gpu and k in torch.cuda.get_device_name(0)), doc.get("sim_device", "H200"))
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if gpu else doc["num_sms"]
    picked = picked_rows(doc, a.pick, a.worst)
    per = [(r["target"], variants(r["target"], num_sms, r, tuple(a.pair_with), after_prefix(doc, r, a.after)))
           for r in picked]
    if not gpu:
        for t, vs in per:
            for label, _, ir, _, _ in vs:
                print(f"{label[:90]:90s} {predict(ir.plan(), device).latency_us:8.1f} us ({device})")
        return
    from megakernel_gym.cuda.nvrtc import _default_arch
    with ProcessPoolExecutor(a.workers or max(1, (os.cpu_count() or 2) - 1), mp_context=get_context("spawn")) as pool:
        t0 = time.perf_counter()
        jobs = [(t, num_sms, v[1], _default_arch(), ()) for t, vs in per for v in vs]
        list(pool.map(compile_job, jobs, chunksize=1))
        log(f"compiled {len(jobs)} megakernels in {time.perf_counter() - t0:.0f} s")
    rows = []
    for t, vs in per:
        rows += measure_target(t, vs, device, a.iters, a.rounds)
    summarize(rows)
    from judge_bench import write
    ok = sum(bool(r.get("correct")) for r in rows)
    targets = [{"target": "every variant correct on the GPU", "measured": f"{ok}/{len(rows)}", "met": ok == len(rows)}]
    out = write("bisect", rows, targets, Path(a.out), prefix="sim_", quiet=True,
                notes=f"rows of {a.runs} taken apart by edit verb; sim constants {device}")
    out["wall_s"] = round(time.perf_counter() - t_start, 1)
    out["adversary_date"] = doc.get("date")    # which adversary run's rows these are
    (Path(a.out) / "sim_bisect.json").write_text(json.dumps(out, indent=1))
    for r in rows:
        log(f"{r['label'][:80]:80s} sim x{r['sim_vs_start']:.3f} gpu x{r.get('gpu_vs_start', float('nan')):.3f}")


def merge(paths: list[Path], out_dir: Path) -> None:
    """One sim_bisect.json of several runs (say, one GPU call each): their rows, each with its run's
    number, every run's command, date, targets and the date of the adversary run it took apart; the
    latest date is the file's. A file merged before counts as its runs, numbered on from the runs before it."""
    docs = [json.loads(p.read_text()) for p in paths]
    if len({d["device"] for d in docs}) != 1:
        raise SystemExit(f"runs on different devices: {sorted({d['device'] for d in docs})}")
    runs = []   # (run entry, its rows, its targets), in order
    for d in docs:
        if "runs" in d:
            for r in d["runs"]:
                runs.append((r, [x for x in d["rows"] if x.get("run") == r["run"]],
                             [t for t in d["targets"] if t.get("run") == r["run"]]))
        else:
            runs.append(({"date": d["date"], "command": d["command"], "wall_s": d.get("wall_s"),
                          "adversary_date": d.get("adversary_date")}, d["rows"], d["targets"]))
    out = dict(docs[-1])
    out["rows"] = [dict(x, run=i) for i, (_, rows, _) in enumerate(runs, 1) for x in rows]
    out["date"] = max(r["date"] for r, _, _ in runs)
    out["command"] = "; ".join(f"run {i}: {r['command']}" for i, (r, _, _) in enumerate(runs, 1)) \
        + "; merged: python " + " ".join(sys.argv)
    out["targets"] = [dict(t, run=i) for i, (_, _, ts) in enumerate(runs, 1) for t in ts]
    out["runs"] = [{"run": i, "date": r["date"], "command": r["command"], "wall_s": r.get("wall_s"),
                    "adversary_date": r.get("adversary_date")} for i, (r, _, _) in enumerate(runs, 1)]
    for k in ("wall_s", "adversary_date"):
        out.pop(k, None)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sim_bisect.json").write_text(json.dumps(out, indent=1))
    log(f"merged {len(out['rows'])} rows of {len(runs)} runs into {out_dir / 'sim_bisect.json'}")

if __name__ == "__main__":
    main()
