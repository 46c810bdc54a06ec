"""Where the sim and the GPU part, task by task (issue 39): a `task_probe.py --dump` run's tasks against
the sim's list schedule of the same plans. Per op of the layers, over the tasks whose SM was free when
their inputs were ready (on the GPU and in the sim alike), the median time from their last producer's
signal to their own: one hop and the task's work. The GPU's, the sim's and the difference say which
ops' hops or bodies the model prices wrong; the end-to-end rows of sim_adversary.json only say that it
does.

    python bench/task_hops.py RUN.json [RUN.json ...] [--device-name H200] [--layers 2 13] [--num-sms 132]
                              [--fit wait_latency_us,quiet_wait_us,...] [--also idle_ring=1,...] [--spread] [--phases]

RUN.json: a task_probe --dump result, its `<name>_tasks.json.gz` (or .json) beside it (every task, or some layers'
with their ids). `--fit` fits constants to the ops' medians (fit_to_tasks) and shows both; `--also` prices
each plan with some constants changed as well, beside the shipped; `--spread` how far each op's wait groups'
last producer signals past their median one (group_spread); `--phases` a layer's phases instead, each op's last
signal from the previous layer's last add (phase_ends). No GPU.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from task_probe import layer_key  # noqa: E402

from megakernel_gym.compiler.costmodel import predict  # noqa: E402


def load_dumps(run: Path) -> list[dict]:
    """A task_probe --dump run's task dumps: `<name>_tasks.json.gz` beside RUN.json (as task_probe writes
    them), or `<name>_tasks.json` (older runs, and a dump unpacked by hand)."""
    packed = run.with_name(run.stem + "_tasks.json.gz")
    if packed.exists():
        return json.loads(gzip.decompress(packed.read_bytes()))
    return json.loads(run.with_name(run.stem + "_tasks.json").read_text())


def ready_to_signal(plan, gpu: dict[int, tuple[float, float]], sim: list[tuple[float, float]],
                    layers: range) -> dict[str, dict]:
    """Per op of `layers` (layer prefix dropped): over its tasks measured in `gpu` (task id -> start,
    signal in us) whose producers were all measured and whose SM predecessor had finished by the time
    their last producer did, on the GPU and in `sim` (per task: start, finish), the median of signal
    less that last producer's signal, each side, and their difference (GPU - sim)."""
    prev = {b: a for q in plan.queues for a, b in zip(q, q[1:])}
    got: dict[str, list[tuple[float, float]]] = {}
    for t in plan.tg.tasks:
        layer, key = layer_key(t.op)
        deps = plan.tg.deps.get(t.id, ())
        if layer is None or layer not in layers or t.id not in gpu or not deps or any(p not in gpu for p in deps):
            continue
        g_ready = max(gpu[p][1] for p in deps)
        s_ready = max(sim[p][1] for p in deps)
        p = prev.get(t.id)
        if p is not None and (p not in gpu or gpu[p][1] > g_ready or sim[p][1] > s_ready):
            continue        # it waited for its SM, not for its inputs
        got.setdefault(key, []).append((gpu[t.id][1] - g_ready, sim[t.id][1] - s_ready))
    out = {}
    for key, v in got.items():
        g, s = statistics.median(x for x, _ in v), statistics.median(y for _, y in v)
        out[key] = {"tasks": len(v), "gpu_us": round(g, 3), "sim_us": round(s, 3), "gpu_minus_sim_us": round(g - s, 3)}
    return out


def phase_ends(plan, gpu: dict[int, tuple[float, float]], sim: list[tuple[float, float]], layers: range,
               last_op: str = "mlp.add") -> list[dict]:
    """Per op of `layers` (layer prefix dropped), in the order the GPU finished them: when its last task signalled,
    from the previous layer's last `last_op` signal, on the GPU and in `sim`, averaged over the layers whose every
    task of the op and of that previous op was measured; and the step from the op before it. A layer's phases
    side by side: which ops the sim runs long or short within a layer, where ready_to_signal's medians see one
    task each (issue 39: llama-1b's expert layer read 1.4 us slow this way, its fused gate/up phase 1.7 us)."""
    ops: dict[str, dict[int, list[int]]] = {}
    for t in plan.tg.tasks:
        layer, key = layer_key(t.op)
        if layer is not None and (layer in layers or layer + 1 in layers):
            ops.setdefault(key, {}).setdefault(layer, []).append(t.id)
    ends = []
    for key, by_layer in ops.items():
        g, s = [], []
        for layer in layers:
            ids, prev = by_layer.get(layer), ops.get(last_op, {}).get(layer - 1)
            if not ids or not prev or any(i not in gpu for i in ids + prev):
                continue
            g.append(max(gpu[i][1] for i in ids) - max(gpu[i][1] for i in prev))
            s.append(max(sim[i][1] for i in ids) - max(sim[i][1] for i in prev))
        if g:
            ends.append({"op": key, "layers": len(g), "gpu_us": statistics.mean(g), "sim_us": statistics.mean(s)})
    ends.sort(key=lambda r: r["gpu_us"])
    for before, r in zip([None] + ends, ends):
        r["gpu_step_us"] = r["gpu_us"] - (before["gpu_us"] if before else 0.0)
        r["sim_step_us"] = r["sim_us"] - (before["sim_us"] if before else 0.0)
    return ends


def group_spread(plan, gpu: dict[int, tuple[float, float]], sim: list[tuple[float, float]], layers: range,
                 least: int = 4) -> dict[str, dict]:
    """Per op of `layers` (layer prefix dropped) whose tasks wait on groups of at least `least` producers,
    all measured in `gpu`: over its distinct producer sets, the median of their count and of their last
    producer's signal less their median producer's, on the GPU and in `sim` (per task: start, finish).
    How far a wait group's last like task lands past the rest (the sim's list schedule draws an op's
    tasks alike, so its spread is the SMs' queues' alone): the time a reader waits that no hop holds."""
    got: dict[str, dict[tuple, tuple[int, float, float]]] = {}
    for t in plan.tg.tasks:
        layer, key = layer_key(t.op)
        deps = tuple(sorted(plan.tg.deps.get(t.id, ())))
        if layer is None or layer not in layers or len(deps) < least or any(p not in gpu for p in deps):
            continue
        g = [gpu[p][1] for p in deps]
        s = [sim[p][1] for p in deps]
        got.setdefault(key, {})[deps] = (len(deps), max(g) - statistics.median(g), max(s) - statistics.median(s))
    out = {}
    for key, sets in got.items():
        v = list(sets.values())
        g, s = statistics.median(x[1] for x in v), statistics.median(x[2] for x in v)
        out[key] = {"groups": len(v), "producers": statistics.median(x[0] for x in v),
                    "gpu_us": round(g, 3), "sim_us": round(s, 3), "gpu_minus_sim_us": round(g - s, 3)}
    return out


def op_error_us(items, dev) -> float:
    """The root mean square of ready_to_signal's GPU - sim over every op of `items` (per plan: plan,
    its task costs, its GPU spans by task id, its layers), each op weighted by the square root of its
    task count (at most 50), with the sim at `dev`'s constants."""
    errs, weights = [], []
    for plan, costs, gpu, layers in items:
        p = predict(plan, dev, costs=costs)
        for r in ready_to_signal(plan, gpu, list(zip(p.start_us, p.finish_us)), layers).values():
            errs.append(r["gpu_minus_sim_us"])
            weights.append(min(r["tasks"], 50) ** 0.5)
    e, w = np.asarray(errs), np.asarray(weights)
    return float(np.sqrt((w * e * e).sum() / w.sum())) if len(e) else 0.0


def fit_to_tasks(items, base, fields: tuple[str, ...], evals: int = 150):
    """`base` with `fields` (DeviceSpec constants) fitted by Nelder-Mead (scipy) to minimise
    op_error_us over `items`; returns (the fitted spec, its error, base's error). Per-op medians see
    the hops and bodies that end-to-end latencies (calibrate.fit_device) see only summed, but not
    the queueing: on 13 H200 dumps of four families (wait, quiet wait, task overhead, own-load and
    ring rates) the ops' error went 1.60 -> 1.08 us while SmolLM2's default step came out 23% slow."""
    from dataclasses import replace

    from scipy.optimize import minimize
    x0 = np.array([getattr(base, f) for f in fields], dtype=float)

    def err(x):
        return 1e9 if np.any(x <= 0) else op_error_us(items, replace(base, **dict(zip(fields, x))))
    r = minimize(err, x0, method="Nelder-Mead", options={"maxfev": evals, "xatol": 1e-3, "fatol": 1e-4})
    return replace(base, **dict(zip(fields, r.x))), float(r.fun), err(x0)


def load_runs(paths, num_sms: int) -> list[tuple]:
    """Per schedule of each task_probe --dump run: (label, its plan, its task costs at the positions
    the run timed: seed 0's draw, megakernel_edits.load_step; its GPU spans by task id, its measured median)."""
    from sim_adversary import step_positions, target_ir

    from megakernel_gym.compiler.costmodel import costs_at
    from megakernel_gym.ir_exposure import apply_edits
    out = []
    for path in paths:
        run = Path(path)
        doc = json.loads(run.read_text())
        dumps = {d["schedule"]: d["tasks"] for d in load_dumps(run)}
        argv = shlex.split(doc["command"])
        model = argv[argv.index("--model") + 1] if "--model" in argv else "llama-1b"
        _, base = target_ir(model, num_sms)
        for row in doc["rows"]:
            if row["schedule"] in dumps:
                plan = apply_edits(base, row["edits"]).plan()
                gpu = {t.get("id", i): (t["start_us"], t["signal_us"]) for i, t in enumerate(dumps[row["schedule"]])}
                out.append((f"{model} {row['schedule']}", plan, costs_at(plan, step_positions(model, "seed")), gpu,
                            row["megakernel"]["median_us"]))
    return out


def priced_specs(device_name: str, also: str | None) -> list:
    """The constants each plan is priced under: the device's as shipped, then (--also) those with the
    fields FIELD=VALUE[,...] replaced (sim_score.variant_specs: a field the spec lacks is refused by name)."""
    from megakernel_gym.compiler.costmodel import DEVICES
    if not also:
        return [DEVICES[device_name]]
    from sim_score import variant_specs
    specs = variant_specs(device_name, [f"also:{also}"])
    return [specs["shipped"], specs["also"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="task_probe.py --dump results (each with its _tasks.json.gz or _tasks.json beside it)")
    ap.add_argument("--device-name", default="H200", help="the sim's constants")
    ap.add_argument("--layers", type=int, nargs=2, default=[2, 13], metavar=("FIRST", "LAST"))
    ap.add_argument("--num-sms", type=int, default=132, help="the SMs of the GPU the runs measured")
    ap.add_argument("--fit", default=None, metavar="A,B",
                    help="fit these DeviceSpec constants to the ops' medians (fit_to_tasks) and show both")
    ap.add_argument("--spread", action="store_true",
                    help="also show, per op, how far its wait groups' last producer signals past their median one (group_spread)")
    ap.add_argument("--phases", action="store_true",
                    help="show each layer's phases instead: when each op's last task signalled, from the previous "
                         "layer's last residual add, GPU and sim (phase_ends)")
    ap.add_argument("--also", default=None, metavar="FIELD=VALUE[,FIELD=VALUE]",
                    help="also price each plan with these constants changed (sim_score's --variant), shown after the shipped")
    args = ap.parse_args()
    devs = priced_specs(args.device_name, args.also)
    dev = devs[0]
    how = {id(d): w for d, w in zip(devs, ("", f", {args.also}"))}    # each spec's words beside its device's name
    layers = range(args.layers[0], args.layers[1] + 1)
    runs = load_runs(args.runs, args.num_sms)
    if args.fit:
        from megakernel_gym.compiler.calibrate import spec_literal
        fitted, after, before = fit_to_tasks([(p, c, g, layers) for _, p, c, g, _ in runs], dev,
                                             tuple(args.fit.split(",")))
        print(f"fitted {args.fit}: ops' error {before:.2f} -> {after:.2f} us\n{spec_literal(fitted)}")
        devs.append(fitted)
        how[id(fitted)] = ", fitted"
    for label, plan, costs, gpu, measured in runs:
        for d in devs:
            pred = predict(plan, d, costs=costs)
            if args.phases:
                print(f"{label}: {measured:.1f} us measured, {pred.latency_us:.1f} predicted ({d.name}{how[id(d)]}); "
                      "each op's last signal from the previous layer's last add, and the step from the op before (us):")
                for r in phase_ends(plan, gpu, list(zip(pred.start_us, pred.finish_us)), layers):
                    print(f"  {r['op']:28s} end gpu {r['gpu_us']:6.2f} sim {r['sim_us']:6.2f} (sim - gpu "
                          f"{r['sim_us'] - r['gpu_us']:+5.2f})  step gpu {r['gpu_step_us']:6.2f} sim {r['sim_step_us']:6.2f}")
                continue
            table = ready_to_signal(plan, gpu, list(zip(pred.start_us, pred.finish_us)), layers)
            print(f"{label}: {measured:.1f} us measured, {pred.latency_us:.1f} predicted ({d.name}{how[id(d)]}); "
                  "from the last producer's signal to the task's (us):")
            for key, r in table.items():
                print(f"  {key:28s} {r['tasks']:5d} tasks  gpu {r['gpu_us']:6.2f}  sim {r['sim_us']:6.2f}  "
                      f"gpu - sim {r['gpu_minus_sim_us']:+6.2f}")
            if args.spread:
                print("  its wait groups of 4 or more producers, the last producer's signal past the median one's (us):")
                for key, r in group_spread(plan, gpu, list(zip(pred.start_us, pred.finish_us)), layers).items():
                    print(f"  {key:28s} {r['groups']:5d} groups of {r['producers']:5.0f}  gpu {r['gpu_us']:6.2f}  "
                          f"sim {r['sim_us']:6.2f}  gpu - sim {r['gpu_minus_sim_us']:+6.2f}")


if __name__ == "__main__":
    main()
