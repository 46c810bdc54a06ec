"""A codegen knob or a schedule edit, checked across the level-5 family problems before it becomes a
default: each problem's expert schedule built with every variant, checked bit for bit against the
expert as it is, and timed in alternating rounds.

    python bench/families_knobs.py [--problems NAME ...] [--rounds 3]
                                   [--edits LABEL=LINES ...] [KEY=VALUE[;...] ...]

A positional argument is one knob set for emit_cuda (as bench/ab_knobs.py takes them, but sets are
separated by spaces and a set's knobs by '&': 'l2_idle=.:2&hold=3'); `--edits` adds a variant whose
edit lines (';'-separated, '*' for every layer as the edit language writes it) follow the expert's.
Writes families_knobs.json: per problem and variant, the median of the rounds' medians (with
spread), the ratio to the expert as it is, and whether its output had the same bits.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ab_knobs import knob_set  # noqa: E402
from judge_bench import write  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("knobs", nargs="*", metavar="KEY=VALUE[&KEY=VALUE]")
    ap.add_argument("--problems", nargs="*", default=None)
    ap.add_argument("--edits", nargs="*", default=[], metavar="LABEL=LINES")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--name", default="families_knobs")
    args = ap.parse_args()
    sets = {spec: knob_set(spec, sep="&") for spec in args.knobs}   # bad specs end here, before the GPU work
    import torch

    from families_gpu import FAMILY_PROBLEMS, problem_ir, problem_launches, time_alternating

    from megakernel_gym.compiler.runtime import Megakernel
    from megakernel_gym.ir_exposure import EditError, apply_edits
    from megakernel_gym.policies.expert import expert_edits
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in args.problems or FAMILY_PROBLEMS:
        mod, cfg, g, ir0 = problem_ir(name, sms)
        expert = expert_edits(ir0)
        irs = {"expert": apply_edits(ir0, expert)}
        for spec in args.edits:
            label, _, lines = spec.partition("=")
            try:
                irs[label] = apply_edits(ir0, expert + "\n" + lines.replace(";", "\n"))
            except EditError as e:   # a family whose ops the edit does not fit: said, not fatal
                print(f"{name}: {label} does not apply ({e})", flush=True)
        builds = {label: (lambda ir=ir: Megakernel(ir.plan(), impls=ir.impls)) for label, ir in irs.items()}
        for spec, knobs in sets.items():
            builds[spec] = lambda knobs=knobs: Megakernel(irs["expert"].plan(), impls=irs["expert"].impls, **knobs)
        launches, outs, _ = problem_launches(mod, cfg, g, builds)
        timed = time_alternating(launches, args.rounds)
        ref = timed["expert"]["median_us"]
        for label in builds:
            same = all(torch.equal(outs[label][k], outs["expert"][k]) for k in outs["expert"])
            rows.append({"problem": name, "variant": label, **timed[label], "vs_expert": round(ref / timed[label]["median_us"], 4),
                         "same_bits_as_expert": same})
            print(f"{name:28s} {label:36s} {timed[label]['median_us']:9.1f} us  x{ref / timed[label]['median_us']:.3f}"
                  f"  same bits {same}", flush=True)
        del launches, outs
        torch.cuda.empty_cache()
    knob_rows = [r for r in rows if r["variant"] in args.knobs]
    targets = [{"target": "every knob set computes the expert's output bit for bit",
                "measured": all(r["same_bits_as_expert"] for r in knob_rows),
                "met": all(r["same_bits_as_expert"] for r in knob_rows)}]
    write(args.name, rows, targets, Path(args.out), prefix="",
          notes="each family problem's expert schedule (seed 0 weights) and its variants, timed in alternating rounds")


if __name__ == "__main__":
    main()
