"""Where each task's time goes: the expert schedule (and any schedule given as edits) run with the
kernel's probes (emit_cuda probes=True), one clock reading at each of a task's phases, so a task's
time splits into what it waited for and what it did after.

    python bench/task_probe.py [--out DIR] [--model llama-1b] [--runs 5] [--layers 2 13]
                               [--extra LABEL=FILE ...] [--no-deps] [--codegen KEY=VALUE[,KEY=VALUE] ...]
                               [--dump [--dump-layers FIRST LAST]]

Per op of the middle layers (the layer prefix dropped, medians over the layers' tasks and the
runs, each run after an L2 flush as the timed runs have):
  wait    queue reached the task -> its counters are full
  input   -> its input vector is in shared memory (a fused norm included; attention: q)
  first   -> its first weight stage has landed (attention: the first scores are in)
  rows    -> its last weight row is done (attention: its outputs or partials are out)
  tail    -> it has signalled (epilogue, combine, stores, the counter release)
Per op also its window: its first task's start to its last task's signal, after the layer's first
start (medians), which shows the chain a layer waits along, and its stragglers: how long after
its median task its last one signals, and which SMs' tasks took their first phase slowly; and,
for an op some of whose tasks sit behind a task of their own layer on their SM, those tasks against
the rest (when they start, their first phase, when they signal). The whole step is also timed with
and without probes, to show what the probes cost. `--no-deps`
adds the same with counters started full (a diagnostic: nothing waits, the output is wrong).
Each `--codegen` set (emit_cuda's knobs, e.g. control_warp=1, ring_stages=3 or hops=ll) adds every schedule
again, built with those knobs, for a side-by-side comparison in the same run.
Writes task_probe.json.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from ab_knobs import knob_sets  # noqa: E402
from judge_bench import write  # noqa: E402
from megakernel_edits import load_step, rel_err, schedule_file  # noqa: E402
from megakernel_gym.compiler.costmodel import DEVICES, fed_positions, predict  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402
from megakernel_gym.cuda.timing import L2Flusher  # noqa: E402
from ring_depth import no_deps_call  # noqa: E402

PHASES = (("wait", "dequeued", "started"), ("input", "started", "input"), ("first", "input", "first"),
          ("rows", "first", "last"), ("tail", "last", "signalled"))


def phases(p: dict[str, float]) -> dict[str, float]:
    """A task's probe times as the durations of its phases (a phase it has no probe for is folded
    into the next one it has)."""
    out, prev = {}, "dequeued"
    for name, _, end in PHASES:
        if end in p:
            out[name] = p[end] - p[prev]
            prev = end
    out["busy"] = p["signalled"] - p["started"]
    return out


def probed_runs(launch, call, n_tasks: int, runs: int, flush) -> tuple[list[list[dict]], list[list[tuple]]]:
    """`runs` runs of a probed launch (`call`: the launch, or a wrapper of it), each after an L2 flush:
    per run each task's probes (launch.task_probes) and its (start, signal) in us (the trace)."""
    probes, spans = [], []
    for _ in range(runs):
        flush()
        call()
        launch.check()
        probes.append(launch.task_probes())
        ns = launch.trace.view(n_tasks, -1)[:, :2].cpu().double() / 1e3
        spans.append([tuple(r) for r in ns.tolist()])
    return probes, spans


def layer_key(op: str) -> tuple[int | None, str]:
    """(layer, op with the layer prefix dropped) of an op name: the first number in it after the first
    part is the layer (layers.3.mlp.down_proj, model.layers.3.mlp.down_proj, transformer.h.3.mlp.c_fc);
    (None, op) for an op outside the layers (embedding, final norm, lm_head)."""
    parts = op.split(".")
    for i, p in enumerate(parts[1:], 1):
        if p.isdigit():
            return int(p), ".".join(parts[i + 1:])
    return None, op


def by_layer_op(plan, layers: range) -> dict[tuple[int, str], list[int]]:
    """The given layers' tasks by (layer, op with the layer prefix dropped)."""
    out: dict[tuple[int, str], list[int]] = {}
    for t in plan.tg.tasks:
        layer, key = layer_key(t.op)
        if layer is not None and layer in layers:
            out.setdefault((layer, key), []).append(t.id)
    return out


def phase_medians(items: list[dict], names) -> dict[str, float | None]:
    """Per phase name, the median over the tasks' phases that have it (None where none has)."""
    out = {}
    for name in names:
        vals = [i[name] for i in items if name in i]
        out[name] = statistics.median(vals) if vals else None
    return out


def op_table(plan, probes_runs: list[list[dict]], layers: range) -> list[dict]:
    """Per op (layer prefix dropped) over the given layers' tasks and every run: the median of each phase."""
    groups: dict[str, list[dict]] = {}
    for (_, key), ids in by_layer_op(plan, layers).items():
        for i in ids:
            for run in probes_runs:
                groups.setdefault(key, []).append(phases(run[i]))
    return [{"op": key, "tasks": len(items) // len(probes_runs), **phase_medians(items, [p[0] for p in PHASES] + ["busy"])}
            for key, items in groups.items()]


def op_windows(plan, spans_runs: list[list[tuple[float, float]]], layers: range) -> list[dict]:
    """Per op (layer prefix dropped): when its first task started and its last one signalled,
    relative to its layer's first start (medians over the layers and runs), which is the chain a
    layer waits along; ops outside the layers (embedding, final norm, lm_head) relative to the
    step's first start. `spans_runs`: per run, each task's (start, finish) in us (the trace's
    %globaltimer)."""
    by_layer: dict[tuple, list[int]] = {}
    for t in plan.tg.tasks:
        layer, key = layer_key(t.op)
        if layer is not None and layer not in layers:
            continue
        by_layer.setdefault((layer, key), []).append(t.id)
    out: dict[str, list[tuple[float, float]]] = {}
    for spans in spans_runs:
        t_step = min(a for a, _ in spans)
        firsts = {}
        for (layer, _), ids in by_layer.items():
            if layer is not None:
                firsts[layer] = min(firsts.get(layer, float("inf")), min(spans[i][0] for i in ids))
        for (layer, key), ids in by_layer.items():
            t0 = t_step if layer is None else firsts[layer]
            out.setdefault(key, []).append((min(spans[i][0] for i in ids) - t0, max(spans[i][1] for i in ids) - t0))
    return [{"op": k, "from_us": statistics.median(a for a, _ in v), "to_us": statistics.median(b for _, b in v)}
            for k, v in out.items()]


def stragglers(plan, probes_runs: list[list[dict]], spans_runs: list[list[tuple[float, float]]], layers: range,
               slow: float = 1.8) -> list[dict]:
    """Per op (layer prefix dropped) over the given layers and runs: how far its last task signals
    after its median task (`spread_us`, the median over layers and runs: what the op's readers wait
    for past the typical task), and the tasks whose `first` phase (a matmul's first weight stage, an
    attention's first scores) took over `slow` times the op's median: their share, and the SMs where
    that happened most (`slow_sms`: SM and count). The 1B expert's attention had whole runs of
    queues loading their keys in 2.6-2.9 us against 1.0 (task_probe_s20_tasks.json), which o_proj
    then waited for: the parts queued behind a q/k/v task of their layer (see `behind`)."""
    sm_of = {t: s for s, q in enumerate(plan.queues) for t in q}
    by_op = by_layer_op(plan, layers)
    spread: dict[str, list[float]] = {}
    firsts: dict[str, list[tuple[float, int]]] = {}
    for probes, spans in zip(probes_runs, spans_runs):
        for (_, key), ids in by_op.items():
            ends = [spans[i][1] for i in ids]
            spread.setdefault(key, []).append(max(ends) - statistics.median(ends))
            for i in ids:
                first = phases(probes[i]).get("first")
                if first is not None:
                    firsts.setdefault(key, []).append((first, sm_of[i]))
    out = []
    for key, vals in spread.items():
        row = {"op": key, "spread_us": statistics.median(vals), "slow_first_share": None, "slow_sms": []}
        fs = firsts.get(key, [])
        if fs:
            med = statistics.median(f for f, _ in fs)
            hits = [sm for f, sm in fs if f > slow * med]
            row["slow_first_share"] = len(hits) / len(fs)
            row["slow_sms"] = [[sm, n] for sm, n in sorted(collections.Counter(hits).items(), key=lambda x: (-x[1], x[0]))[:8]]
        out.append(row)
    return out


def behind(plan, probes_runs: list[list[dict]], spans_runs: list[list[tuple[float, float]]],
           layers: range) -> list[dict]:
    """Per op (layer prefix dropped) over the given layers and runs, its tasks in two groups: those
    queued right behind a task of their own layer on their SM (`behind`: they start once it is done)
    and the rest; per group its tasks a layer, the medians of their start and signal after the op's
    first start in its layer (and the latest signal), and the median of each phase. On the 1B expert
    28 of a layer's 64 attention parts sit behind a q/k/v task (96 q/k/v tasks and 64 parts do not
    fit on 132 SMs); they started 7 us after the others and, where their inputs were already there,
    loaded their keys in 2.4-2.9 us against 1.0, since the KV slice they had just sent to L2 was
    still on its way (task_probe_s20's dump), until the weight ring's copies went evict-first."""
    prev = {b: a for q in plan.queues for a, b in zip(q, q[1:])}
    by_op = by_layer_op(plan, layers)
    layer_of = {i: lay for (lay, _), ids in by_op.items() for i in ids}
    groups: dict[tuple[str, bool], list[dict]] = {}
    for probes, spans in zip(probes_runs, spans_runs):
        for (lay, key), ids in by_op.items():
            t0 = min(spans[i][0] for i in ids)
            for i in ids:
                late = layer_of.get(prev.get(i)) == lay
                groups.setdefault((key, late), []).append(
                    {"start": spans[i][0] - t0, "signal": spans[i][1] - t0, **phases(probes[i])})
    per = len(probes_runs) * len(layers)
    out = []
    for (key, late), items in sorted(groups.items()):
        row = {"op": key, "behind": late, "tasks": len(items) / per,
               "start_us": statistics.median(i["start"] for i in items),
               "signal_us": statistics.median(i["signal"] for i in items),
               "signal_max_us": max(i["signal"] for i in items), **phase_medians(items, [p[0] for p in PHASES])}
        out.append(row)
    return out


def fmt_behind(rows: list[dict]) -> str:
    """behind()'s rows as one line: each op with tasks in both groups, those behind first."""
    both = {r["op"] for r in rows if r["behind"]} & {r["op"] for r in rows if not r["behind"]}

    def group(g: dict) -> str:
        first = "-" if g["first"] is None else f"{g['first']:.2f}"
        return f"{g['tasks']:.0f} at {g['start_us']:.1f}, first {first}, signal {g['signal_us']:.1f}/{g['signal_max_us']:.1f}"
    return ("behind a task of their layer on their SM vs the rest (tasks a layer at their start, first phase, signal "
            "median/last, us after the op's first start): "
            + ("; ".join(f"{op} " + " vs ".join(group(g) for g in sorted((r for r in rows if r["op"] == op),
                                                                          key=lambda r: not r["behind"]))
                         for op in sorted(both)) or "none"))


def fmt(row: dict) -> str:
    cells = " ".join(f"{row[k]:7.2f}" if row[k] is not None else "      -" for k in ("wait", "input", "first", "rows",
                                                                                  "tail", "busy"))
    return f"{row['op']:24s} {row['tasks']:5d} {cells}"


def sim_ops(plan, device: str, layers: range, positions=None) -> dict:
    """The sim's view of the same schedule (costmodel.predict with `device`'s constants, at the step's
    `positions` where given, else at the judge's expectation): its latency and, per op of the layers as
    op_table and op_windows group them, the median task time (start to finish) and the op's window,
    beside the probes' `busy` and windows: where the model and the kernel part."""
    pred = predict(plan, device, positions=positions)
    spans = list(zip(pred.start_us, pred.finish_us))
    busy = {}
    for (_, key), ids in by_layer_op(plan, layers).items():
        busy.setdefault(key, []).extend(spans[i][1] - spans[i][0] for i in ids)
    return {"device": device, "latency_us": pred.latency_us, "floor_us": pred.floor_us,
            "busy": {k: statistics.median(v) for k, v in busy.items()},
            "windows": op_windows(plan, [spans], layers)}


def fmt_sim(sim: dict, table: list[dict] | None, windows: list[dict] | None) -> list[str]:
    """Per op: the probes' busy and window (where measured) beside the sim's."""
    gpu_busy = {r["op"]: r.get("busy") for r in table or []}
    gpu_win = {w["op"]: w for w in windows or []}
    lines = [f"{'op':28s} {'busy gpu':>9s} {'sim':>7s}   {'window gpu':>15s} {'sim':>15s}  (us)"]
    for w in sim["windows"]:
        k, g = w["op"], gpu_win.get(w["op"])
        gb, sb = gpu_busy.get(k), sim["busy"].get(k)
        lines.append(f"{k[:28]:28s} {gb if gb is not None else float('nan'):9.2f} {sb if sb is not None else float('nan'):7.2f}   "
                     + (f"{g['from_us']:7.1f}-{g['to_us']:7.1f}" if g else f"{'':15s}")
                     + f" {w['from_us']:7.1f}-{w['to_us']:7.1f}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b", help="a zoo model or a level-5 problem (mk_gpt2_large_batch2)")
    ap.add_argument("--device-name", default=None, help="the sim's constants beside the probes (default: the GPU's)")
    ap.add_argument("--sim-only", action="store_true",
                    help="no GPU: the sim's per-op table of each schedule alone (what the GPU run sets beside it)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--layers", type=int, nargs=2, default=[2, 13], metavar=("FIRST", "LAST"))
    ap.add_argument("--extra", nargs="*", default=[], metavar="LABEL=FILE",
                    help="more schedules: a label and a file of edits (a line TUNED stands for tuned_edits, "
                         "EXPERT for expert_edits)")
    ap.add_argument("--no-deps", action="store_true", help="also probe each schedule with its counters started full")
    ap.add_argument("--codegen", nargs="*", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                    help="more builds of each schedule with these emit_cuda knobs (integers or names)")
    ap.add_argument("--tag", default="", help="suffix of the result's name (task_probe<tag>.json)")
    ap.add_argument("--dump", action="store_true",
                    help="also write every task of each build's first run (task_probe<tag>_tasks.json.gz): op, SM, "
                         "start and signal after the step's first start, its phases")
    ap.add_argument("--dump-layers", type=int, nargs=2, default=None, metavar=("FIRST", "LAST"),
                    help="with --dump: only these layers' tasks, each with its id in the plan (a smaller file)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    builds = knob_sets(args.codegen)   # bad specs end here, before the GPU work
    layers = range(args.layers[0], args.layers[1] + 1)
    gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.sim_only else ""
    device = args.device_name or next((k for k in DEVICES if k in gpu_name), "H100")
    if args.sim_only:
        from sim_adversary import target_ir
        step, base = None, target_ir(args.model, 132)[1]
    else:
        step = load_step(args.model)
        base = step.base
    schedules = {"expert": expert_edits(base)}
    for spec in args.extra:
        label, _, path = spec.partition("=")
        schedules[label] = schedule_file(base, path)
    if args.sim_only:
        for label, text in schedules.items():
            sim = sim_ops(apply_edits(base, text).plan(), device, layers)
            print(f"{label}: sim {sim['latency_us']:.1f} us ({device}), floor {sim['floor_us']:.1f} us")
            print("\n".join(fmt_sim(sim, None, None)))
        return
    flush = L2Flusher(torch, torch.cuda.current_device())
    rows, dumps = [], []
    for label, text in schedules.items():
        ir = apply_edits(base, text)
        plan = ir.plan()
        for nodeps, knobs in [(False, b) for b in builds] + ([(True, {})] if args.no_deps else []):
            t0 = time.perf_counter()
            mk = Megakernel(plan, impls=ir.impls, probes=True, **knobs)
            launch = mk.bind(step.params, step.feeds, trace=True)
            call = no_deps_call(launch) if nodeps else launch
            runs, spans = probed_runs(launch, call, len(plan.tg.tasks), args.runs, flush)
            err = None if nodeps else rel_err(launch.outputs()[step.graph.outputs[0]], step.truth)
            probed = time_us(no_deps_call(mk.bind(step.params, step.feeds)) if nodeps
                             else mk.bind(step.params, step.feeds), args.iters)
            plain = Megakernel(plan, impls=ir.impls, **knobs)
            timed = plain.bind(step.params, step.feeds)
            t = time_us(no_deps_call(timed) if nodeps else timed, args.iters)
            table = op_table(plan, runs, layers)
            windows = op_windows(plan, spans, layers)
            late = stragglers(plan, runs, spans, layers)
            queued = behind(plan, runs, spans, layers)
            sim = None if nodeps or knobs else sim_ops(plan, device, layers, fed_positions(step.graph, step.feeds))
            row = {"schedule": label + "".join(f", {k}={v}" for k, v in knobs.items())
                   + (" [no deps: diagnostic]" if nodeps else ""), "no_deps": nodeps, "codegen": knobs,
                   "megakernel": t, "with_probes": probed, "floor_share": step.floor_us / t["median_us"],
                   "rel_l2_err_vs_fp32": err, "ops": table, "windows": windows, "stragglers": late, "behind": queued, "sim": sim, "edits": text, "build_s": time.perf_counter() - t0}
            rows.append(row)
            if args.dump:
                t_step = min(a for a, _ in spans[0])
                sm_of = {t: s for s, q in enumerate(plan.queues) for t in q}
                keep = (range(args.dump_layers[0], args.dump_layers[1] + 1) if args.dump_layers else None)
                dumps.append({"schedule": row["schedule"], "tasks": [
                    {**({"id": task.id} if keep else {}),
                     "op": task.op, "part": task.part, "sm": sm_of[task.id], "start_us": round(spans[0][task.id][0] - t_step, 3),
                     "signal_us": round(spans[0][task.id][1] - t_step, 3),
                     "phases": {k: round(v, 3) for k, v in phases(runs[0][task.id]).items()}
                     if {"dequeued", "started", "signalled"} <= set(runs[0][task.id]) else {}}
                    for task in plan.tg.tasks if keep is None or layer_key(task.op)[0] in keep]})
            print(f"{row['schedule']}: {t['median_us']:.1f} us (p10 {t['p10_us']:.1f}, p90 {t['p90_us']:.1f}); "
                  f"with probes {probed['median_us']:.1f} us; err/fp32 {err}", flush=True)
            print(f"{'op (layers %d-%d)' % (layers[0], layers[-1]):24s} tasks    wait   input   first    rows"
                  "    tail    busy  (us, medians)", flush=True)
            for r in table:
                print(fmt(r), flush=True)
            print("windows (us after the layer's first start; outside the layers: after the step's): "
                  + "; ".join(f"{w['op']} {w['from_us']:.1f}-{w['to_us']:.1f}" for w in windows), flush=True)
            print("stragglers (last signal after the median task; share of slow first phases, their SMs): "
                  + "; ".join(f"{r['op']} {r['spread_us']:.1f} us" + (f", {r['slow_first_share']:.0%} {r['slow_sms'][:4]}"
                                                                     if r["slow_first_share"] else "") for r in late), flush=True)
            print(fmt_behind(queued), flush=True)
            if sim:
                print(f"the sim ({device}): {sim['latency_us']:.1f} us against {t['median_us']:.1f} measured", flush=True)
                print("\n".join(fmt_sim(sim, table, windows)), flush=True)
            del launch, mk, plain, timed
    real = [r for r in rows if not r["no_deps"]]
    targets = [
        {"target": "every schedule as close to the float32 truth as eager bf16 (relative L2 error <= 1.5x eager's)",
         "measured": max(r["rel_l2_err_vs_fp32"] for r in real), "eager": step.eager_err,
         "met": all(r["rel_l2_err_vs_fp32"] <= 1.5 * step.eager_err for r in real)},
        {"target": "probes cost the step at most 3% (so their phases describe the real kernel)",
         "measured": max(r["with_probes"]["median_us"] / r["megakernel"]["median_us"] for r in rows),
         "met": all(r["with_probes"]["median_us"] <= 1.03 * r["megakernel"]["median_us"] for r in rows)},
    ]
    if args.dump:   # one file beside the result: every task of every build's first run, gzipped (2-7 MB of
        # JSON a run; the device takes at most 64 MiB of working tree, so git keeps them small: task_hops reads it)
        (out / f"task_probe{args.tag}_tasks.json.gz").write_bytes(gzip.compress(json.dumps(dumps).encode(), mtime=0))
    write("task_probe" + args.tag, rows, targets, out, prefix="",
          notes=f"model {args.model} on {torch.cuda.get_device_name()}; floor {step.floor_us:.0f} us "
                f"({step.bw:.0f} GB/s copy bandwidth measured in this run); phases are medians over layers "
                f"{layers[0]}-{layers[-1]} and {args.runs} runs, each after an L2 flush; clock64 converted with the "
                "rate the tasks' %globaltimer gives")


if __name__ == "__main__":
    main()
