"""Cost-model calibration (issue 6, item 6): the sim backend's predictions against measured megakernels.

    python bench/megakernel_schedules.py [--out DIR] [--n 40] [--iters 20] [--model llama-1b]
                                         [--device-name H100|H200] [--seed 0]
    python bench/megakernel_schedules.py --dry-run [--n 40]      # CPU: sample and predict, no GPU
    python bench/megakernel_schedules.py --refit bench/results/megakernel_schedules.json   # CPU: fit again

Samples n varied schedules of one zoo model (compiler.calibrate.sample_schedules: tile sizes, SM
ranges, prefetch depths, counter granularity, fusions, op order; from everything on a sixteenth
of the chip to fused and prefetched), and for each: the cost model's prediction with the
datasheet constants of costmodel.DEVICES, one megakernel run checked against the float32 truth
(relative L2 error within 1.5x eager bf16's; a wrong result is recorded, and left out of the fit;
its max abs difference from the first schedule's output is kept too), and its measured latency
(median, p10, p90). Then fits the device constants to the measurements (calibrate.fit_device)
and reports Spearman's rank correlation and the error before and after, with a held-out check
(fit on the even-numbered schedules, scored on the odd). Writes megakernel_schedules.json and
megakernel_schedules.png (predicted vs measured, log-log), and prints the fitted DeviceSpec as a
line to paste into costmodel.DEVICES.

--refit FILE fits the cost model again to the measurements a GPU run recorded in FILE (the same
schedules, rebuilt from its --n and --seed and checked label by label), on the CPU: for a change to
the model itself, not to the kernel. The result keeps the recorded device, date and command
(`refit_of`) and is written where --out says (bench/results by default).

--dry-run builds the graph on the meta device, predicts every schedule, and checks the fit on
synthetic measurements (predictions under a perturbed DeviceSpec, with 3% noise) so the whole
path can be tried without a GPU; it writes only when --out is given, to *_dry_run.* files.
Progress goes to stderr; the table and the DeviceSpec line to stdout.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import ZOO, capture  # noqa: E402
from megakernel_gym.compiler.calibrate import (agreement, fit_device, sample_schedules,  # noqa: E402
                                               spec_literal)
from megakernel_gym.compiler.costmodel import DATASHEET, DEVICES, predict, task_costs  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits  # noqa: E402
from megakernel_gym.policies.expert import LEVERS, attention_matmuls, expert_edits  # noqa: E402

SPEARMAN_TARGET = 0.9
MIN_SCHEDULES = 30
RECORDED = ("compile_s", "measured", "max_abs_err_vs_first", "rel_l2_err_vs_fp32", "correct", "error")
GAIN_TOLERANCE = 0.05          # the expert's predicted gain over the default within 5% of the measured one
TUNED, EXPERT = "tuned (the compiler's tuned edits)", "expert"
# the inflight edit's two sides, so a fit can measure what fewer copies in flight save (capped_wait)
EXPERT_UNCAPPED, TUNED_CAPPED = "expert without its inflight edits", "tuned + inflight 1 beside attention"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pick_device(name: str | None) -> str:
    if name:
        if name not in DEVICES:
            raise SystemExit(f"--device-name {name!r} is not one of {', '.join(DEVICES)} (costmodel.DEVICES)")
        return name
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        return next((k for k in DEVICES if k in gpu), "H100")
    return "H100"


def measure(plan, params, feeds, out_name, ref, iters: int) -> dict:
    """Compile, run once (the output checked against `ref`), then time. Returns the row's fields."""
    from megakernel_gym.compiler.runtime import Megakernel, time_us
    t0 = time.perf_counter()
    mk = Megakernel(plan)
    compile_s = time.perf_counter() - t0
    launch = mk.bind(params, feeds)
    launch()
    launch.check()
    out = launch.outputs()[out_name].float().clone()
    row = {"compile_s": round(compile_s, 2), "_out": out}
    if ref is not None:
        row["max_abs_err_vs_first"] = float((out - ref).abs().max())
    row["measured"] = time_us(launch, iters)
    del launch, mk
    return row


def run_check(rows: list[dict], step) -> dict:
    """The run's own check of its outputs, as a target: every schedule ran, as close to the truth as eager."""
    errs = [r.get("rel_l2_err_vs_fp32") for r in rows if r.get("rel_l2_err_vs_fp32") is not None]
    return {"target": "every schedule runs and is as close to the float32 truth as eager bf16 "
                      "(relative L2 error <= 1.5x eager's)",
            "measured": {"max_rel_l2_err_vs_fp32": max(errs, default=None), "eager": step.eager_err,
                         "wrong_or_failed": sum(not r.get("correct") for r in rows)},
            "met": all(r.get("correct") for r in rows)}


def context_alive() -> bool:
    """False once a kernel trapped: the CUDA context then refuses everything after it."""
    try:
        torch.cuda.synchronize()
        return True
    except RuntimeError:
        return False


def synthetic_measurements(plans_costs, base, seed: int) -> tuple[list[float], object]:
    """Dry run only: predictions under a hidden DeviceSpec unlike `base`, times 3% lognormal noise."""
    hidden = replace(base, name="hidden", hbm_gbs=base.hbm_gbs * 0.55, task_overhead_us=base.task_overhead_us * 4,
                     wait_latency_us=base.wait_latency_us * 2, mem_latency_us=base.mem_latency_us * 1.5,
                     launch_us=base.launch_us * 2, capped_wait=0.3)
    rng = random.Random(seed)
    return [predict(p, hidden, costs=c).latency_us * math.exp(rng.gauss(0, 0.03)) for p, c in plans_costs], hidden


def near_schedules(paths: list[Path], base_ir) -> list[tuple[str, object, dict]]:
    """(label, IR, recorded fields) for each extra schedule (--extra LABEL=FILE, the command a
    bench/ab_knobs.py result file records) that file measured with the default codegen: its median
    over the alternating rounds, and its check (the defaults' bits and the float32 truth)."""
    import shlex

    from megakernel_edits import schedule_file
    out = []
    for path in paths:
        doc = json.loads(path.read_text())
        argv = shlex.split(doc["command"])
        labels = {r["schedule"] for r in doc["rows"]}
        files, i = {}, argv.index("--extra") + 1 if "--extra" in argv else len(argv)
        while i < len(argv) and not argv[i].startswith("-"):   # LABEL=FILE ... (a knob set names no schedule)
            label, _, file = argv[i].partition("=")
            if label in labels and file:
                files[label] = file
            i += 1
        for r in doc["rows"]:
            if r["schedule"] in files and not r.get("knobs"):
                ir = apply_edits(base_ir, schedule_file(base_ir, str(ROOT / files[r["schedule"]])))
                out.append((f"{r['schedule']} ({path.name})", ir,
                            {"measured": {"median_us": r["median_us"], "rounds_us": r["round_medians_us"]},
                             "rel_l2_err_vs_fp32": r["rel_l2_err_vs_fp32"],
                             "correct": bool(r["same_bits_as_defaults"])}))
    return out


def holdout(plans_costs, measured, base) -> dict:
    """Fit on the even-numbered schedules, score on the odd ones: what the fit says about schedules it
    has not seen."""
    train = list(range(0, len(measured), 2))
    test = list(range(1, len(measured), 2))
    dev, _ = fit_device([plans_costs[i] for i in train], [measured[i] for i in train], base)
    pred = [predict(plans_costs[i][0], dev, costs=plans_costs[i][1]).latency_us for i in test]
    return {"train": len(train), "test": len(test), **agreement(pred, [measured[i] for i in test])}


def scatter_png(rows, path: Path, title: str, size: int = 640) -> None:
    """Predicted (x) against measured (y), log-log, with the y = x line: grey rings before the
    fit, filled blue dots after, red for a schedule whose output was wrong (not fitted)."""
    from PIL import Image, ImageDraw
    pts = [(r["predicted_us"], r["predicted_fit_us"], r["measured"]["median_us"], r.get("correct", True))
           for r in rows if r.get("measured")]
    if not pts:
        return
    vals = [v for p in pts for v in p[:3]]
    lo, hi = math.log10(min(vals)) - 0.05, math.log10(max(vals)) + 0.05
    pad = 70
    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)

    def xy(px: float, my: float) -> tuple[float, float]:
        span = size - 2 * pad
        return (pad + (math.log10(px) - lo) / (hi - lo) * span, size - pad - (math.log10(my) - lo) / (hi - lo) * span)
    d.rectangle([pad, pad, size - pad, size - pad], outline=(0, 0, 0))
    d.line([xy(10 ** lo, 10 ** lo), xy(10 ** hi, 10 ** hi)], fill=(180, 180, 180))
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= math.log10(v) <= hi:
                x, _ = xy(v, 10 ** lo)
                _, y = xy(10 ** lo, v)
                d.line([x, size - pad, x, size - pad + 5], fill=(0, 0, 0))
                d.line([pad - 5, y, pad, y], fill=(0, 0, 0))
                d.text((x - 12, size - pad + 8), f"{v:g}", fill=(0, 0, 0))
                d.text((8, y - 6), f"{v:g}", fill=(0, 0, 0))
    for before, after, meas, ok in pts:
        x, y = xy(before, meas)
        d.ellipse([x - 4, y - 4, x + 4, y + 4], outline=(150, 150, 150))
        x, y = xy(after, meas)
        d.ellipse([x - 4, y - 4, x + 4, y + 4], fill=(31, 119, 180) if ok else (214, 39, 40))
    d.text((pad, 20), title, fill=(0, 0, 0))
    d.text((pad, 38), "x: predicted us (grey: datasheet constants, blue: fitted)   y: measured median us",
           fill=(0, 0, 0))
    img.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="results folder (default bench/results; a dry run writes "
                                                "only when given)")
    ap.add_argument("--n", type=int, default=40, help="schedules to sample")
    ap.add_argument("--iters", type=int, default=20, help="timed runs per schedule (at least)")
    ap.add_argument("--model", default="llama-1b", choices=sorted(ZOO))
    ap.add_argument("--device-name", default=None, choices=sorted(DEVICES),
                    help="the costmodel.DEVICES entry to start from (default: from the GPU's name)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sampled schedule combinations")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: sample, predict, fit synthetic data")
    ap.add_argument("--near", type=Path, nargs="*", default=[], metavar="AB_KNOBS_JSON",
                    help="with --refit: also fit the extra schedules these bench/ab_knobs.py results measured (their "
                         "--extra LABEL=FILE schedules, default codegen), each as its file recorded it")
    ap.add_argument("--refit", type=Path, default=None, metavar="FILE",
                    help="CPU only: fit again to the measurements of an earlier run's megakernel_schedules.json")
    args = ap.parse_args()
    out = Path(args.out or ROOT / "bench" / "results")
    t_start = time.perf_counter()
    recorded = None
    if args.refit:
        recorded = json.loads(args.refit.read_text())
        if args.dry_run:
            raise SystemExit("--refit fits recorded measurements; --dry-run fits synthetic ones: pass one of them")
    if not args.dry_run and recorded is None and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run on the device, or pass --dry-run to check the pipeline on the CPU")
    # the fit starts from the datasheet constants, so before/after and the held-out check do not
    # lean on constants an earlier fit of these same schedules produced; the constants the project
    # ships (costmodel.DEVICES) are scored beside them
    base = DATASHEET[pick_device(args.device_name)]
    shipped_dev = DEVICES[base.name]
    num_sms = (torch.cuda.get_device_properties(0).multi_processor_count if not args.dry_run and recorded is None
               else base.num_sms)
    if num_sms != base.num_sms:
        base, shipped_dev = replace(base, num_sms=num_sms), replace(shipped_dev, num_sms=num_sms)

    graph = capture(*ZOO[args.model](device="meta"), args.model)
    schedules = sample_schedules(graph, args.n, seed=args.seed, num_sms=num_sms)
    # the compiler's own points beside the sampled ones: the tuned schedule and the expert's (whose
    # gain over the default the sim must predict within 5%, issue 15)
    base_ir = make_ir(graph, num_sms=num_sms)
    tuned_ir, expert_ir = apply_edits(base_ir, tuned_edits(base_ir)), apply_edits(base_ir, expert_edits(base_ir))
    ours, seen = [], set()
    for label, ir in [(TUNED, tuned_ir), (EXPERT, expert_ir),
                      (EXPERT_UNCAPPED, apply_edits(base_ir, expert_edits(
                          base_ir, levers=tuple(x for x in LEVERS if x != "inflight")))),
                      (TUNED_CAPPED, apply_edits(tuned_ir, "\n".join(f"inflight {n} n=1"
                                                                     for n in attention_matmuls(tuned_ir))))]:
        if ir.text not in seen:   # (on a model narrower than the expert's inflight lever its two experts are one)
            seen.add(ir.text)
            ours.append((label, ir))
    schedules[1:1] = ours
    log(f"{len(schedules)} schedules of {args.model} on {num_sms} SMs, starting from {base.name}'s constants "
        f"({time.perf_counter() - t_start:.0f} s)")
    if recorded is not None and [r["label"] for r in recorded["rows"]] != [label for label, _ in schedules]:
        # the sampler draws from what the edits accept, which may have grown since the GPU run (MAX_TASKS
        # 65,536 took a combination that was refused then): rebuild the recorded schedules by label
        # from a longer draw of the same seed
        more = dict(sample_schedules(graph, args.n + 40, seed=args.seed, num_sms=num_sms)) | dict(schedules)
        missing = [r["label"] for r in recorded["rows"] if r["label"] not in more]
        if missing:
            raise SystemExit(f"{args.refit}: its schedules are not the ones --n {args.n} --seed {args.seed} samples "
                             f"({missing[0]!r} is not drawn; its command: {recorded['command']}); pass the --n and "
                             f"--seed it ran with")
        schedules = [(r["label"], more[r["label"]]) for r in recorded["rows"]]
    near = near_schedules(args.near, base_ir) if args.near else []
    if near and recorded is None:
        raise SystemExit("--near adds recorded measurements to a refit: pass --refit too")
    schedules += [(label, ir) for label, ir, _ in near]
    params = feeds = out_name = step = None
    bw = None
    if not args.dry_run and recorded is None:
        from megakernel_edits import load_step, rel_err
        step = load_step(args.model)   # the weights, inputs, float32 truth and eager bf16's error against it
        params, feeds, bw = step.params, step.feeds, step.bw
        out_name = graph.outputs[0]

    rows, plans_costs, ref, alive = [], [], None, True
    for i, (label, ir) in enumerate(schedules):
        t0 = time.perf_counter()
        plan = ir.plan()
        costs = task_costs(plan)
        plans_costs.append((plan, costs))
        row = {"label": label, "tasks": len(plan.tg.tasks),
               "predicted_us": predict(plan, base, costs=costs).latency_us,
               "predicted_shipped_us": predict(plan, shipped_dev, costs=costs).latency_us}
        if recorded is not None and i >= len(recorded["rows"]):   # a schedule an A/B run measured (--near)
            row.update(near[i - len(recorded["rows"])][2])
        elif recorded is not None:   # the measurement and its checks, as that run recorded them
            row.update({k: v for k, v in recorded["rows"][i].items() if k in RECORDED})
        elif not args.dry_run and alive:
            try:
                row.update(measure(plan, params, feeds, out_name, ref, args.iters))
                out = row.pop("_out")
                if ref is None:
                    ref = out
                    row["max_abs_err_vs_first"] = 0.0
                # as close to the float32 truth as eager bf16 (schedules that change the arithmetic, such
                # as split attention, differ from the first schedule by a bf16 rounding or two)
                row["rel_l2_err_vs_fp32"] = rel_err(out, step.truth)
                row["correct"] = (row["rel_l2_err_vs_fp32"] <= max(1.5 * step.eager_err, 1e-3)
                                  and bool(torch.isfinite(out).all()))
            except Exception as e:  # noqa: BLE001 - a schedule that fails is a result, not the end of the run
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                row["correct"] = False
                alive = context_alive()
                if not alive:
                    log("the CUDA context is gone after that failure; the remaining schedules are predicted only")
        row["build_s"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        meas = row.get("measured", {}).get("median_us")
        log(f"[{i + 1}/{len(schedules)}] {label[:60]:60s} tasks {row['tasks']:6d}  predicted {row['predicted_us']:8.1f} us"
            + (f"  measured {meas:8.1f} us  err {row.get('max_abs_err_vs_first', float('nan')):.2e}" if meas else "")
            + (f"  {row['error'][:80]}" if "error" in row else "") + f"  ({row['build_s']:.1f} s)")

    if not args.dry_run and recorded is None:
        # the measurements first, as a file --refit reads, so a run stopped during the fit (minutes on the CPU)
        # keeps them; the full file below replaces it
        write("schedules", rows, [run_check(rows, step)], out,
              notes=f"measurements only (the fit had not run); model {args.model}, {num_sms} SMs, seed {args.seed}",
              prefix="megakernel_", quiet=True)
    # the fit: on the schedules measured and correct (every schedule in a dry run, on synthetic data)
    if args.dry_run:
        synthetic, hidden = synthetic_measurements(plans_costs, base, args.seed)
        for row, m in zip(rows, synthetic):
            row["measured"] = {"median_us": m, "synthetic": True}
        use = list(range(len(rows)))
    else:
        use = [i for i, r in enumerate(rows) if r.get("correct") and r.get("measured")]
    if len(use) < 3:
        raise SystemExit(f"only {len(use)} schedules were measured correctly; nothing to fit "
                         f"(see the rows: {[r.get('error', '') for r in rows][:3]})")
    t_fit = time.perf_counter()
    fitted, report = fit_device([plans_costs[i] for i in use], [rows[i]["measured"]["median_us"] for i in use], base,
                                name=base.name)
    fit_s = time.perf_counter() - t_fit
    for row, (plan, costs) in zip(rows, plans_costs):
        row["predicted_fit_us"] = predict(plan, fitted, costs=costs).latency_us
    held = holdout([plans_costs[i] for i in use], [rows[i]["measured"]["median_us"] for i in use], base)
    before, after = report["before"], report["after"]
    shipped = agreement([rows[i]["predicted_shipped_us"] for i in use], [rows[i]["measured"]["median_us"] for i in use])

    print(f"\n{'schedule':64s} {'tasks':>6s} {'pred us':>9s} {'fit us':>9s} {'measured':>9s}")
    for r in rows:
        m = r.get("measured", {}).get("median_us")
        print(f"{r['label'][:64]:64s} {r['tasks']:6d} {r['predicted_us']:9.1f} {r['predicted_fit_us']:9.1f} "
              + (f"{m:9.1f}" if m else f"{'-':>9s}") + ("" if r.get("correct", True) else "  WRONG/FAILED"))
    preds = [r["predicted_us"] for r in rows]
    print(f"\npredicted latency (datasheet constants): min {min(preds):.1f} us, max {max(preds):.1f} us "
          f"({max(preds) / min(preds):.1f}x)")
    print(f"fit on {len(use)} schedules in {fit_s:.1f} s ({len(report['rounds']) - 1} rounds): "
          f"Spearman {before['spearman']:.3f} -> {after['spearman']:.3f}, median abs error "
          f"{before['median_abs_pct_err']:.1f}% -> {after['median_abs_pct_err']:.1f}%, "
          f"held-out Spearman {held['spearman']:.3f} (fit on {held['train']}, scored on {held['test']}); "
          f"the shipped constants (costmodel.DEVICES[{base.name!r}]): Spearman {shipped['spearman']:.3f}, median "
          f"abs error {shipped['median_abs_pct_err']:.1f}%")
    if args.dry_run:
        print("synthetic check: hidden constants "
              + ", ".join(f"{k}={getattr(hidden, k):.4g}" for k in report["fitted"]) + "\n           fitted "
              + ", ".join(f"{k}={v:.4g}" for k, v in report["fitted"].items()))
    print("\nfitted DeviceSpec (for costmodel.DEVICES):")
    print("    " + spec_literal(fitted))
    log(f"total {time.perf_counter() - t_start:.0f} s")

    if args.dry_run and not args.out:
        return
    suffix = "_dry_run" if args.dry_run else ""
    targets = [
        {"target": f"Spearman(predicted, measured) >= {SPEARMAN_TARGET} over >= {MIN_SCHEDULES} schedules of "
                   f"{args.model}, with the fitted constants",
         "measured": round(after["spearman"], 4), "schedules": len(use),
         "met": after["spearman"] >= SPEARMAN_TARGET and len(use) >= MIN_SCHEDULES},
        {"target": f"Spearman >= {SPEARMAN_TARGET} on held-out schedules (fit on the even-numbered, scored on the odd)",
         "measured": round(held["spearman"], 4), "met": held["spearman"] >= SPEARMAN_TARGET},
        {"target": f"Spearman >= {SPEARMAN_TARGET} with the constants the project ships (costmodel.DEVICES)",
         "measured": round(shipped["spearman"], 4), "met": shipped["spearman"] >= SPEARMAN_TARGET},
        {"target": "the fit lowers the median absolute % error of the predictions",
         "measured": f"{before['median_abs_pct_err']:.1f}% -> {after['median_abs_pct_err']:.1f}%",
         "met": after["median_abs_pct_err"] < before["median_abs_pct_err"]},
    ]
    by_label = {r["label"]: r for r in rows}
    d, x = by_label["default"], by_label[EXPERT]
    if d.get("correct", args.dry_run) and x.get("correct", args.dry_run):
        pred_gain = d["predicted_fit_us"] / x["predicted_fit_us"]
        meas_gain = d["measured"]["median_us"] / x["measured"]["median_us"]
        targets.append({"target": f"the expert's predicted gain over the default (fitted constants) within "
                                  f"{GAIN_TOLERANCE:.0%} of the measured one",
                        "measured": {"predicted": round(pred_gain, 3), "measured": round(meas_gain, 3)},
                        "met": abs(pred_gain / meas_gain - 1) <= GAIN_TOLERANCE})
    if recorded is not None:   # the run's own check of its outputs
        targets += [t for t in recorded["targets"] if t["target"].startswith("every schedule runs")]
    elif not args.dry_run:
        targets.append(run_check(rows, step))
    notes = (f"{'SYNTHETIC measurements (dry run on the CPU). ' if args.dry_run else ''}"
             f"model {args.model}, {num_sms} SMs, seed {args.seed}; started from costmodel.DATASHEET[{base.name!r}]; "
             f"fitted: {spec_literal(fitted)}"
             + (f"; device copy bandwidth measured in this run: {bw:.0f} GB/s" if bw else ""))
    if recorded is not None:
        notes = f"REFIT on the CPU of the measurements of {recorded['date']} ({recorded['device']}). " + notes
    doc = write("schedules" + suffix, rows, targets, out, notes=notes, prefix="megakernel_")
    if recorded is not None:   # the measurements' device and run; this file's command is the refit
        doc["device"] = recorded["device"]
        doc["refit_of"] = {k: recorded[k] for k in ("date", "command", "device")}
    doc["fit"] = {"fitted": report["fitted"], "base": report["base"], "device_spec": spec_literal(fitted),
                  "before": before, "after": after, "holdout": held, "shipped": shipped, "rounds": report["rounds"],
                  "schedules_fitted": len(use), "fit_s": round(fit_s, 1)}
    (out / f"megakernel_schedules{suffix}.json").write_text(json.dumps(doc, indent=2))
    scatter_png(rows, out / f"megakernel_schedules{suffix}.png",
                f"{args.model}, {len(use)} schedules on {doc['device']}: Spearman {before['spearman']:.3f} "
                f"(datasheet) -> {after['spearman']:.3f} (fitted)")


if __name__ == "__main__":
    main()
