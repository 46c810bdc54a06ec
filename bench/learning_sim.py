"""Learning that shows, on the sim: a small policy over the edit menu trained from scratch with
REINFORCE (policies/learn.py), scored on held-out zoo models as it trains.

    python bench/learning_sim.py [--out DIR] [--episodes 300] [--seed 0] [--save PATH]

Writes the trained weights (--save; by default the package's policies/menu_policy.json, which
`mkgym eval --policy learned` plays and bench/learning_gpu.py measures on a GPU), learning_sim.json (the curve: held-out greedy geomean speedup over the default schedule,
predicted with the calibrated H100 cost model, and the mean training return) and
learning_curve.png, with the compiler's default (1.0x) and its heuristic (tuned_edits) as
reference lines. CPU only; about half a minute.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import predict  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits, tuned_edits  # noqa: E402
from megakernel_gym.policies.learn import SHIPPED_WEIGHTS, train_menu_policy, zoo_irs  # noqa: E402

TRAIN = ["mlp-1b", "llama-tiny"]
HELDOUT = ["attention-1b", "attention-tiny"]


def curve_png(curve, heuristic: float, path: Path, title: str, w: int = 720, h: int = 420) -> None:
    from PIL import Image, ImageDraw
    pad_l, pad_r, pad_t, pad_b = 70, 20, 40, 50
    xs = [p["episode"] for p in curve]
    ys = [p["heldout_geomean_speedup"] for p in curve]
    lo, hi = min(ys + [1.0, heuristic]) - 0.02, max(ys + [1.0, heuristic]) + 0.02
    img = Image.new("RGB", (w, h), (255, 255, 255))
    d = ImageDraw.Draw(img)

    def xy(x: float, y: float) -> tuple[float, float]:
        return (pad_l + x / max(xs[-1], 1) * (w - pad_l - pad_r),
                h - pad_b - (y - lo) / (hi - lo) * (h - pad_t - pad_b))
    d.rectangle([pad_l, pad_t, w - pad_r, h - pad_b], outline=(0, 0, 0))
    for y, color, label in ((1.0, (150, 150, 150), "default schedule"), (heuristic, (44, 160, 44), "heuristic")):
        d.line([xy(0, y), xy(xs[-1], y)], fill=color, width=1)
        d.text((xy(xs[-1], y)[0] - 110, xy(0, y)[1] - 14), f"{label} {y:.3f}x", fill=color)
    d.line([xy(x, y) for x, y in zip(xs, ys)], fill=(31, 119, 180), width=2)
    for x, y in zip(xs, ys):
        cx, cy = xy(x, y)
        d.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=(31, 119, 180))
    for k in range(5):
        y = lo + (hi - lo) * k / 4
        d.text((8, xy(0, y)[1] - 6), f"{y:.3f}x", fill=(0, 0, 0))
    for x in xs[:: max(1, len(xs) // 6)]:
        d.text((xy(x, lo)[0] - 8, h - pad_b + 6), str(x), fill=(0, 0, 0))
    d.text((w // 2 - 60, h - 22), "training episodes", fill=(0, 0, 0))
    d.text((pad_l, 12), title, fill=(0, 0, 0))
    img.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default=str(SHIPPED_WEIGHTS), help="where the trained weights go ('' to keep none)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy, curve = train_menu_policy(TRAIN, HELDOUT, episodes=args.episodes, eval_every=args.eval_every,
                                      lr=1.0, seed=args.seed, log=sys.stderr)
    held = zoo_irs(HELDOUT)
    heur = {n: predict(ir.plan(), "H100").latency_us / predict(apply_edits(ir, tuned_edits(ir)).plan(), "H100").latency_us
            for n, ir in held.items()}
    heur_geo = math.exp(sum(map(math.log, heur.values())) / len(heur))
    first, last = curve[0]["heldout_geomean_speedup"], curve[-1]["heldout_geomean_speedup"]
    train_first = next(p["train_return_mean"] for p in curve if p["train_return_mean"] is not None)
    train_last = curve[-1]["train_return_mean"]
    targets = [
        {"target": "the learned policy is ahead of the compiler's default schedule on held-out models (sim, "
                   "greedy, geomean predicted speedup > 1)", "measured": round(last, 4), "met": last > 1.0},
        {"target": "held-out score rises with training (last > first)", "measured": [round(first, 4), round(last, 4)],
         "met": last > first},
        {"target": "mean training return rises (last window > first window)",
         "measured": [round(train_first, 4), round(train_last, 4)], "met": train_last > train_first},
    ]
    doc = write("learning_sim", curve, targets, out, prefix="",
                notes=f"CPU, sim backend with the calibrated H100 cost model; train {TRAIN}, held out {HELDOUT}; "
                      f"{args.episodes} episodes of 3 edits, seed {args.seed}; heuristic (tuned_edits) on the held-out "
                      f"models: {heur_geo:.3f}x geomean ({', '.join(f'{k} {v:.3f}x' for k, v in heur.items())}); "
                      f"the learned greedy edits: {curve[-1]['heldout_edits']}")
    if args.save:
        policy.save(args.save, trained_on=TRAIN, heldout=HELDOUT, episodes=args.episodes, seed=args.seed,
                    command=" ".join(["python bench/learning_sim.py"] + sys.argv[1:]),
                    heldout_predicted_speedup=curve[-1]["heldout_speedup"])
    curve_png(curve, heur_geo, out / "learning_curve.png",
              f"held-out predicted speedup (greedy) vs training: {HELDOUT}, trained on {TRAIN}")
    print(f"held-out geomean speedup {first:.3f}x -> {last:.3f}x (heuristic {heur_geo:.3f}x); "
          f"train return {train_first:+.3f} -> {train_last:+.3f}")
    return doc


if __name__ == "__main__":
    main()
