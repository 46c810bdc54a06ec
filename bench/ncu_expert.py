"""Where the expert megakernel's warps stall, by Nsight Compute's warp-state sampling.

On the GPU machine (ncu reads the counters there; leave the clocks alone):
    ncu --clock-control none --kernel-name megakernel --launch-skip 3 --launch-count 1 \
        --section WarpStateStats --section SourceCounters -o OUT/mk python bench/ncu_expert.py
    ncu -i OUT/mk.ncu-rep --page source --csv --print-source sass > OUT/source.csv
Then, anywhere:
    python bench/ncu_expert.py --summarize OUT/source.csv --device "NVIDIA H100 80GB HBM3"

The first form builds the 1B expert schedule and launches it four times (ncu profiles the
fourth). The second sums the samples per stall reason over the kernel and names the SASS
instructions that hold the most samples, and writes bench/results/ncu_warp_stalls.json.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def launch() -> None:
    import torch
    from megakernel_edits import load_step
    from megakernel_gym.compiler.runtime import Megakernel
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.policies.expert import expert_edits
    step = load_step("llama-1b")
    ir = apply_edits(step.base, expert_edits(step.base))
    bound = Megakernel(ir.plan(), impls=ir.impls).bind(step.params, step.feeds)
    for _ in range(4):
        bound()
    torch.cuda.synchronize()
    bound.check()


def summarize(path: Path, top: int = 12) -> tuple[list[dict], dict]:
    """Per stall reason: samples and share of all; and the `top` instructions by samples, each
    with its reasons."""
    rows = list(csv.reader(path.open()))
    head = next(r for r in rows if r and r[0] == "Address")
    data = rows[rows.index(head) + 1:]
    cols = [i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda x: float(x) if x.replace(".", "", 1).isdigit() else 0.0  # noqa: E731
    totals = {head[i]: sum(num(d[i]) for d in data) for i in cols}
    all_samples = sum(totals.values())
    reasons = [{"reason": k, "samples": v, "share": v / all_samples}
               for k, v in sorted(totals.items(), key=lambda kv: -kv[1])]
    per = [(sum(num(d[i]) for i in cols), d) for d in data]   # each instruction's samples, summed once
    hot = [{"sass": d[1].strip(), "samples": n, "share": n / all_samples,
            "reasons": {head[i]: num(d[i]) for i in cols if num(d[i]) >= 0.05 * n}}
           for n, d in sorted(per, key=lambda nd: -nd[0])[:top]]
    return reasons, {"instructions": len(data), "samples": all_samples, "hottest": hot}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", type=Path, help="ncu's source page as CSV (see the module docstring)")
    ap.add_argument("--device", default="NVIDIA H100 80GB HBM3")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.summarize is None:
        launch()
        return
    import datetime
    import json
    reasons, extra = summarize(args.summarize)
    when = datetime.datetime.fromtimestamp(args.summarize.stat().st_mtime).isoformat(timespec="seconds")
    doc = {"name": "ncu_warp_stalls", "device": args.device, "date": when,
           "command": "ncu --clock-control none --kernel-name megakernel --launch-skip 3 --launch-count 1 "
                      "--section WarpStateStats --section SourceCounters -o OUT/mk python bench/ncu_expert.py; "
                      "ncu -i OUT/mk.ncu-rep --page source --csv --print-source sass > OUT/source.csv; "
                      "python " + " ".join(sys.argv),
           "rows": reasons, "targets": [], "hottest": extra["hottest"],
           "notes": f"warp-state samples of one launch of the 1B expert megakernel ({int(extra['samples'])} over "
                    f"{extra['instructions']} SASS instructions); date = when ncu's CSV was written"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ncu_warp_stalls.json").write_text(json.dumps(doc, indent=2))
    for r in reasons[:8]:
        print(f"{r['reason']:22s} {r['share']:6.1%}")


if __name__ == "__main__":
    main()
