"""emit_cuda's knobs side by side: each schedule built once per knob set, then timed in alternating
rounds (every build of every schedule once per round, the order rotated), so drift on the host shows
as spread, not as a difference between builds.

    python bench/ab_knobs.py [--out DIR] [--model llama-1b] [--schedules expert tuned default]
                             [--extra LABEL=FILE ...] [--rounds 3] [--iters 30] [--tag _producer]
                             KEY=VALUE[,KEY=VALUE] ...

Each positional argument is one knob set (emit_cuda's keywords: producer=warp, ring_stages=5,
hops=ll, ...); the defaults are always the first build. A knob set written LABEL:KEY=VALUE,... is
built for that schedule alone (knobs one schedule's plan takes and another's refuses). `--extra` adds schedules from files of edits (a line EXPERT
stands for the expert's edits, TUNED for the compiler's tuned edits), each built with every knob set. Every build's output is checked against the
defaults' bit for bit and against the float32 truth. Writes ab_knobs<tag>.json: per schedule and
build, the median of each round's median and every round's numbers, and the ratios to the schedule's
defaults and to the first schedule's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_edits import NAMED_SCHEDULES, load_step, named_edits, rel_err, schedule_file  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits  # noqa: E402


def knob_set(spec: str, sep: str = ",") -> dict:
    """'producer=warp,ring_stages=5' -> {'producer': 'warp', 'ring_stages': 5} (knobs joined by `sep`)."""
    out = {}
    for kv in spec.split(sep):
        parts = kv.split("=")
        if len(parts) != 2 or not parts[0]:
            raise SystemExit(f"knob set {spec!r}: write KEY=VALUE, several joined by {sep!r} "
                             f"(e.g. 'inflight=1{sep}hold=3')")
        k, v = parts
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


def knob_sets(specs: list[str]) -> list[dict]:
    """Each spec's knob_set; the defaults first."""
    return [{}] + [knob_set(spec) for spec in specs]


def scoped(spec: str) -> tuple[str | None, str]:
    """'lm768:claim=x' -> ('lm768', 'claim=x'): a knob set for one schedule; a spec whose text before
    its first ':' holds a '=' (a value with a colon, as inflight_ops=attn:1) is for every schedule."""
    head, colon, rest = spec.partition(":")
    return (head, rest) if colon and "=" not in head and head else (None, spec)


def label(knobs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "defaults"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("knobs", nargs="*", metavar="KEY=VALUE[,KEY=VALUE]")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--schedules", nargs="*", default=["expert"], choices=list(NAMED_SCHEDULES))
    ap.add_argument("--extra", nargs="*", default=[], metavar="LABEL=FILE",
                    help="more schedules: a label and a file of edits (EXPERT / TUNED lines stand for those edits)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    scopes = [scoped(spec) for spec in args.knobs]
    sets = knob_sets([spec for _, spec in scopes])   # bad specs end here, before the GPU work
    only = [None] + [sched for sched, _ in scopes]   # per knob set: the one schedule it is for, or None
    names = args.schedules + [spec.partition("=")[0] for spec in args.extra]
    for sched in only:
        if sched is not None and sched not in names:
            raise SystemExit(f"knob set for {sched!r}: no such schedule (the schedules: {', '.join(names)})")
    step = load_step(args.model)
    base = step.base
    edits = {name: lambda name=name: named_edits(base, name) for name in NAMED_SCHEDULES}
    for spec in args.extra:
        name, _, path = spec.partition("=")
        edits[name] = lambda path=path: schedule_file(base, path)
    builds = []   # every schedule's builds, timed together below
    for sched in names:
        ir = apply_edits(base, edits[sched]())
        plan = ir.plan()
        want = None
        for knobs in (k for k, o in zip(sets, only) if o in (None, sched)):
            mk = Megakernel(plan, impls=ir.impls, **knobs)
            launch = mk.bind(step.params, step.feeds)
            launch()
            launch.check()
            out = {k: v.clone() for k, v in launch.outputs().items()}
            want = want or out
            same = all(torch.equal(out[k], want[k]) for k in want)
            builds.append({"schedule": sched, "knobs": knobs, "launch": launch, "same_bits": same,
                           "err": rel_err(out[step.graph.outputs[0]], step.truth), "rounds": []})
            print(f"{sched} [{label(knobs)}]: threads {mk.table.threads}, ring {mk.table.ws_stages}, "
                  f"same bits as defaults {same}", flush=True)
    # every build of every schedule once per round, the order rotated by one each round, so that
    # schedules compare with each other as fairly as a schedule's knob sets do
    for r in range(args.rounds):
        for b in builds[r % len(builds):] + builds[:r % len(builds)]:
            b["rounds"].append(time_us(b["launch"], args.iters))
    med = {id(b): statistics.median(t["median_us"] for t in b["rounds"]) for b in builds}
    first = med[id(builds[0])]
    rows = []
    for b in builds:
        ref = med[id(next(d for d in builds if d["schedule"] == b["schedule"]))]   # its schedule's defaults
        m = med[id(b)]
        rows.append({"schedule": b["schedule"], "knobs": b["knobs"], "median_us": m,
                     "round_medians_us": [round(t["median_us"], 1) for t in b["rounds"]],
                     "round_p10_p90_us": [(round(t["p10_us"], 1), round(t["p90_us"], 1)) for t in b["rounds"]],
                     "speedup_vs_defaults": ref / m, "speedup_vs_first": first / m, "floor_share": step.floor_us / m,
                     "same_bits_as_defaults": b["same_bits"], "rel_l2_err_vs_fp32": b["err"]})
        print(f"{b['schedule']:8s} {label(b['knobs']):36s} {m:8.1f} us  rounds {rows[-1]['round_medians_us']}  "
              f"x{ref / m:.3f} (x{first / m:.3f} vs {builds[0]['schedule']})", flush=True)
    targets = [{"target": "every build computes the defaults' output bit for bit",
                "measured": all(r["same_bits_as_defaults"] for r in rows),
                "met": all(r["same_bits_as_defaults"] for r in rows)}]
    write("knobs" + args.tag, rows, targets, Path(args.out), prefix="ab_",
          notes=f"{args.model}, floor {step.floor_us:.0f} us at {step.bw:.0f} GB/s device copy; each round times every "
                f"build of every schedule once ({args.iters}+ launches, L2 flushed), the order rotated by one per "
                "round; speedup_vs_first is against the first schedule's defaults")


if __name__ == "__main__":
    main()
