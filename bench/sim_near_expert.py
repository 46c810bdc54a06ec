"""The sim's search around the expert schedule (issue 15): whole-model moves in the edit language
(every layer at once), alone and in random combinations, predicted on a device's fitted constants;
the best few are written as schedule files for bench/ab_knobs.py to time on the GPU.

    python bench/sim_near_expert.py [--out DIR] [--device H100] [--combos 400] [--best 6] [--seed 0]

A move is one line on top of the expert's edits (the line EXPERT in a schedule file): the attention's
split, the q/k/v, o_proj(+add), gate/up(+silu) and down(+add) tile sizes, the attention's SM range,
op counters on q/k/v, lm_head's tiles. Moves the edit language refuses are skipped. Writes
sim_near_expert.json (every candidate's prediction) and bench/schedules/near_<rank>.edits.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import ZOO, capture, predict  # noqa: E402
from megakernel_gym.ir_exposure import EditError, apply_edits, make_ir  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402

MOVES = (
    [f"split layers.*.attn.decode_attention n={n}" for n in (2, 8, 16)]
    + [f"tile layers.*.attn.q_proj n={n}" for n in (16, 64, 128)]
    + [f"tile layers.*.attn.{p}_proj n={n}" for p in "kv" for n in (16, 64)]
    + [f"tile layers.*.attn.add n={n}" for n in (8, 32, 64)]
    + [f"tile layers.*.mlp.silu_mul n={n}" for n in (32, 128)]
    + [f"tile layers.*.mlp.add n={n}" for n in (8, 32)]
    + [f"assign layers.*.attn.decode_attention sms={a}-{b}" for a, b in ((0, 63), (64, 127), (100, 131))]
    + [f"counter layers.*.attn.{p}_proj op" for p in "qkv"]
    + [f"tile lm_head n={n}" for n in (501, 1002, 2004)]
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--schedules", type=Path, default=ROOT / "bench" / "schedules")
    ap.add_argument("--device", default="H100")
    ap.add_argument("--combos", type=int, default=400)
    ap.add_argument("--best", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    expert = apply_edits(base, expert_edits(base))
    ref = predict(expert.plan(), args.device).latency_us
    rng = random.Random(args.seed)
    sets = [(m,) for m in MOVES]
    seen = set(sets)
    while len(sets) < len(MOVES) + args.combos:
        pick = tuple(sorted(rng.sample(MOVES, rng.randint(2, 3))))
        if len({m.rsplit(" ", 1)[0] for m in pick}) == len(pick) and pick not in seen:   # one value per knob
            seen.add(pick)
            sets.append(pick)
    rows, t0 = [], time.perf_counter()
    for moves in sets:
        try:
            ir = apply_edits(expert, "\n".join(moves))
        except EditError as e:
            rows.append({"moves": list(moves), "refused": str(e)[:200]})
            continue
        us = predict(ir.plan(), args.device).latency_us
        rows.append({"moves": list(moves), "predicted_us": round(us, 2), "vs_expert": round(ref / us, 4)})
    took = time.perf_counter() - t0
    ok = sorted((r for r in rows if "predicted_us" in r), key=lambda r: r["predicted_us"])
    print(f"{len(rows)} candidates in {took:.0f} s ({len(ok)} accepted); expert predicted {ref:.1f} us", flush=True)
    for rank, r in enumerate(ok[:args.best]):
        args.schedules.mkdir(parents=True, exist_ok=True)
        path = args.schedules / f"near_{rank}.edits"
        path.write_text("EXPERT\n" + "\n".join(r["moves"]) + "\n")
        r["file"] = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        print(f"  {r['predicted_us']:8.1f} us ({r['vs_expert']:.3f}x)  {'; '.join(r['moves'])}", flush=True)
    targets = [{"target": "a schedule the sim predicts faster than the expert, to time on the GPU",
                "measured": ok[0]["vs_expert"] if ok else None, "met": bool(ok) and ok[0]["vs_expert"] > 1.0}]
    write("near_expert", [{"device_constants": args.device, "expert_predicted_us": round(ref, 2),
                           "candidates": len(rows), "seconds": round(took, 1)}] + ok + [r for r in rows if "refused" in r],
          targets, args.out, prefix="sim_")


if __name__ == "__main__":
    main()
