"""The README's training quickstart, measured (issue 40): `mkgym train quickstart` with the shipped config
on this machine's CPU, its reward curve recorded.

    python bench/learning_quickstart.py [--run runs/quickstart_bench] [--out bench/results]

Writes bench/results/learning_quickstart.json (the per-step rewards, the wall time, the config) and
learning_quickstart.png (the run's reward curve). Targets: the run ends within 10 minutes on a 2-core
CPU, and the mean reward of its last five steps is above its first step's (the untrained model's) by
more than twice the standard error of that difference (from the steps' own spreads over their batches).
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=str(ROOT / "runs" / "quickstart_bench"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    from megakernel_gym.policies.quickstart import train_quickstart
    s = train_quickstart(None, a.run, log=sys.stdout)
    curve = s["curve"]
    # a step's mean reward is over its batch's completions: its standard error is the batch spread / sqrt(batch)
    n = s["config"]["per_device_train_batch_size"]
    first, last = curve[0], curve[-5:]
    last_mean = statistics.fmean(c["reward"] for c in last)
    gain = last_mean - first["reward"]
    se = math.sqrt((first["reward_std"] ** 2 + statistics.fmean(c["reward_std"] ** 2 for c in last) / len(last)) / n)
    targets = [{"target": "the quickstart ends within 10 minutes on this CPU", "measured_s": s["seconds"],
                "met": s["seconds"] <= 600},
               {"target": "the reward rises: the last five steps' mean reward exceeds the first step's (the untrained "
                          "model's) by more than twice the standard error of the difference",
                "first_step": round(first["reward"], 4), "last_five": round(last_mean, 4), "gain": round(gain, 4),
                "standard_error": round(se, 4),
                "mean_speedup_sampled": [round(math.exp(first["reward"]), 4), round(math.exp(last_mean), 4)],
                "met": gain > 2 * se}]
    out = Path(a.out)
    write("learning_quickstart", curve, targets, out, prefix="", quiet=True,
          notes=f"mkgym train quickstart with the shipped config (policies/quickstart.toml) on {os.cpu_count()} CPU "
                f"cores: {s['steps']} GRPO steps on {', '.join(s['problems'])}, best speedup seen "
                f"{s['best_speedup']:.3f}x; config {s['config']}")
    shutil.copy(s["picture"], out / "learning_quickstart.png")
    for t in targets:
        print(("met  " if t["met"] else "MISS ") + t["target"], {k: v for k, v in t.items() if k not in ("target", "met")})


if __name__ == "__main__":
    main()
