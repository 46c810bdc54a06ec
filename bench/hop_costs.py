"""Where the expert's step loses time to the floor, hop by hop (a diagnostic, on the GPU):

    python bench/hop_costs.py [--out DIR] [--model llama-1b] [--iters 30]

The expert schedule is timed as it is, then once per kind of dependency hop with that kind's waits
dropped from the plan (the consumer starts without waiting for that producer, so its output is
wrong: timing only), then with every wait met from the start (counters filled: `no deps`). What a
row gains over the expert bounds what removing that hop (a fusion, a forwarded value, a cheaper
signal) can gain: removing a hop that is not on the critical path moves it to another.

From the expert's own trace (%globaltimer at each task's start, after its waits, and end, after its
signal) it also gives, for the middle layers, when each op's tasks start and end relative to the
previous layer's last task, and a picture of the weight bytes streamed per microsecond: each task's
weight bytes spread over its run (bytes the ring fetched while the task waited count at its run,
so the waits look idler than they are). Writes bench/results/hop_costs.json and hop_costs.png.
"""
from __future__ import annotations

import argparse
import copy
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_edits import load_step, rel_err  # noqa: E402
from ring_depth import no_deps_call  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402

# consumer op (regex on the op name) <- producer op: one decoder layer's hops, in step order
HOPS = {
    "q/k/v <- previous layer's down": (r"attn\.[qkv]_proj$", r"mlp\.add$"),
    "cache writes <- k/v": (r"_cache_write$", r"attn\.[kv]_proj$"),
    "attention <- cache writes": (r"decode_attention$", r"_cache_write$"),
    "attention <- q": (r"decode_attention$", r"q_proj$"),
    "o_proj <- attention": (r"attn\.add$", r"decode_attention$"),
    "gate/up <- o_proj": (r"mlp\.silu_mul$", r"attn\.add$"),
    "down <- gate/up": (r"mlp\.add$", r"mlp\.silu_mul$"),
}
CHAIN = ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.k_cache_write", "attn.v_cache_write",
         "attn.decode_attention", "attn.add", "mlp.silu_mul", "mlp.add"]


def without_hop(plan, consumer: str, producer: str):
    """A copy of the plan whose `consumer` tasks no longer wait on counters only `producer` tasks
    signal, and how many waits that drops."""
    tasks = plan.tg.tasks
    only = {c.id: all(re.search(producer, tasks[p].op) for p in c.producers) for c in plan.counters}
    out, dropped, waits = copy.copy(plan), 0, {}
    for t, ws in plan.waits.items():
        keep = [(c, th) for c, th in ws if not (re.search(consumer, tasks[t].op) and only[c])]
        dropped += len(ws) - len(keep)
        waits[t] = keep
    out.waits = waits
    return out, dropped


def weight_bytes(plan) -> dict[str, float]:
    """Per op: the weight bytes one of its tasks streams (its own and its fused producers' weights,
    over its tasks)."""
    g = plan.tg.graph
    out = {}
    for op, ids in plan.tg.by_op.items():
        if not ids or g.op(op).kind == "embedding":   # the embedding reads one row of its table
            out[op] = 0.0
            continue
        names = [op] + [p for p, _ in plan.tg.tasks[ids[0]].prologue]
        w = {x for n in names for x in g.op(n).inputs if g.tensors[x].kind == "weight"}
        out[op] = sum(g.tensors[x].numel * 2 for x in w) / len(ids)
    return out


def trace_summary(plan, start, finish, layers) -> dict:
    by: dict[str, list[int]] = {}
    for t in plan.tg.tasks:
        by.setdefault(t.op, []).append(t.id)
    end = {op: max(finish[i] for i in ids) for op, ids in by.items() if ids}
    first, last = layers[0], layers[-1]
    n_layers = len(layers)
    return {"layer_us": (end[f"layers.{last}.mlp.add"] - end[f"layers.{first - 1}.mlp.add"]) / n_layers,
            "attention_half_us": statistics.median(end[f"layers.{i}.attn.add"] - end[f"layers.{i - 1}.mlp.add"]
                                                   for i in layers),
            "lm_head_us": end["lm_head"] - max(v for k, v in end.items() if k.startswith("layers."))}


def chain_table(plan, start, finish, layers) -> list[dict]:
    """Per op of a layer: medians over `layers` of its first start, median end and last end, relative
    to the previous layer's last task, and its median task time (us)."""
    by: dict[str, list[int]] = {}
    for t in plan.tg.tasks:
        by.setdefault(t.op, []).append(t.id)
    rows = []
    for op in CHAIN:
        cols = {"first_start": [], "median_end": [], "last_end": [], "task": []}
        for i in layers:
            ids = by.get(f"layers.{i}.{op}")
            if not ids:
                continue
            t0 = max(finish[j] for j in by[f"layers.{i - 1}.mlp.add"])
            cols["first_start"].append(min(start[j] for j in ids) - t0)
            cols["median_end"].append(statistics.median(finish[j] for j in ids) - t0)
            cols["last_end"].append(max(finish[j] for j in ids) - t0)
            cols["task"].append(statistics.median(finish[j] - start[j] for j in ids))
        if cols["task"]:
            rows.append({"op": op, "tasks": len(by[f"layers.{layers[0]}.{op}"]),
                         **{k: round(statistics.median(v), 2) for k, v in cols.items()}})
    return rows


def bandwidth(plan, start, finish, per_task: dict[str, float]) -> np.ndarray:
    """TB/s per microsecond of the step: each task's weight bytes spread evenly over its run."""
    n = int(max(finish)) + 2
    bw = np.zeros(n)
    for t in plan.tg.tasks:
        b, s, f = per_task[t.op], start[t.id], finish[t.id]
        if b <= 0 or f <= s:
            continue
        edges = np.arange(int(s), int(f) + 2, dtype=float)
        lo, hi = np.maximum(edges[:-1], s), np.minimum(edges[1:], f)
        bw[int(s):int(s) + len(lo)] += np.clip(hi - lo, 0, None) * b / (f - s)
    return bw / 1e6   # bytes per us -> TB/s


def picture(series: dict[str, np.ndarray], lo: int, hi: int, peak: float, path: Path):
    """One panel per series: TB/s over [lo, hi) us, a dotted line at the floor's rate (Pillow)."""
    from PIL import Image, ImageDraw
    w, h, pad, top = 1000, 160, 46, 8
    img = Image.new("RGB", (w + pad + 10, len(series) * (h + 40) + 24), "white")
    d = ImageDraw.Draw(img)
    ymax = max(3.5, peak * 1.15)
    for k, (name, bw) in enumerate(series.items()):
        y0 = k * (h + 40) + top + 14
        d.text((pad, y0 - 14), f"{name}: weight bytes streamed per us (TB/s), {lo}-{hi} us", fill="black")
        d.rectangle([pad, y0, pad + w, y0 + h], outline=(180, 180, 180))
        seg = bw[lo:hi]
        xs = [pad + i * w / max(1, len(seg) - 1) for i in range(len(seg))]
        ys = [y0 + h - min(v, ymax) / ymax * h for v in seg]
        d.line(list(zip(xs, ys)), fill=(31, 119, 180), width=2)
        yp = y0 + h - peak / ymax * h
        for x in range(pad, pad + w, 8):
            d.line([(x, yp), (x + 3, yp)], fill=(120, 120, 120))
        for x_us in range(lo - lo % 50 + 50, hi, 50):
            x = pad + (x_us - lo) * w / max(1, hi - lo - 1)
            d.line([(x, y0 + h), (x, y0 + h + 4)], fill="black")
            d.text((x - 10, y0 + h + 5), f"{x_us} us", fill="black")
        for v in (0, 1, 2, 3):
            y = y0 + h - v / ymax * h
            d.text((4, y - 6), f"{v}", fill="black")
    d.text((pad, img.height - 16), f"dotted: the floor's rate ({peak:.2f} TB/s, the device copy); "
                                   "bytes the ring fetched during a wait count at the task's run", fill="black")
    img.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--layers", type=int, nargs=2, default=[2, 13], help="middle layers the chain is summarised over")
    args = ap.parse_args()
    out = Path(args.out)
    step = load_step(args.model)
    ir = apply_edits(step.base, expert_edits(step.base))
    plan = ir.plan()
    layers = range(args.layers[0], args.layers[1] + 1)
    per_task = weight_bytes(plan)
    variants = [("expert", plan, 0, False)]
    variants += [(f"without {name}", *without_hop(plan, *pair), False) for name, pair in HOPS.items()]
    variants.append(("no deps: every wait met from the start", plan, 0, True))
    rows, series, chain = [], {}, None
    for name, pl, dropped, nodeps in variants:
        t0 = time.perf_counter()
        mk = Megakernel(pl, impls=ir.impls)
        traced = mk.bind(step.params, step.feeds, trace=True)
        call = no_deps_call(traced) if nodeps else traced
        call()
        call()    # the second run's trace (the first warms the code and the tables)
        torch.cuda.synchronize()
        start, finish = traced.task_times_us()
        timed = mk.bind(step.params, step.feeds)
        t = time_us(no_deps_call(timed) if nodeps else timed, args.iters)
        row = {"variant": name, "dropped_waits": dropped, "diagnostic": name != "expert", "megakernel": t,
               "floor_share": step.floor_us / t["median_us"],
               # with every wait met, tasks run out of layer order: no layer or half to speak of
               **{k: None if nodeps else round(v, 2) for k, v in trace_summary(pl, start, finish, layers).items()}}
        if name == "expert":
            row["rel_l2_err_vs_fp32"] = rel_err(timed.outputs()[step.graph.outputs[0]], step.truth)
            chain = chain_table(pl, start, finish, layers)
            row["chain"] = chain
        if name == "expert" or nodeps:
            series[name.split(":")[0]] = bandwidth(pl, start, finish, per_task)
        rows.append(row)
        print(f"{name:45s} {t['median_us']:8.1f} us (p10 {t['p10_us']:.1f}, p90 {t['p90_us']:.1f}); "
              f"layer {row['layer_us']} us, attention half {row['attention_half_us']}, "
              f"lm_head {row['lm_head_us']}; {time.perf_counter() - t0:.0f} s", flush=True)
        del mk, traced, timed
    print(f"{'op (layers %d-%d)' % (layers[0], layers[-1]):26s} tasks  first start  median end  last end  task",
          flush=True)
    for r in chain:
        print(f"{r['op']:26s} {r['tasks']:5d} {r['first_start']:12.2f} {r['median_end']:11.2f} "
              f"{r['last_end']:9.2f} {r['task']:5.2f}", flush=True)
    mid = int(rows[0]["megakernel"]["median_us"] * 0.4)
    span = int(4 * rows[0]["layer_us"])
    picture(series, mid, mid + span, step.bw / 1e3, out / "hop_costs.png")
    base = rows[0]["megakernel"]["median_us"]
    err = rows[0]["rel_l2_err_vs_fp32"]
    targets = [{"target": "the 1B decode step <= 950 us on an H100 (issue 15)", "measured": base, "met": base <= 950},
               {"target": "the expert's output as close to the float32 truth as eager bf16 (relative L2 error "
                          "<= 1.5x eager's; the other rows are diagnostics with wrong outputs)",
                "measured": err, "eager": step.eager_err, "met": err <= 1.5 * step.eager_err}]
    write("hop_costs", rows, targets, out, prefix="",
          notes=f"model {args.model} on {torch.cuda.get_device_name()}; floor {step.floor_us:.0f} us "
                f"({step.bw:.0f} GB/s copy bandwidth measured in this run); each 'without' row drops one kind of "
                "wait from the expert's plan (timing only: its output is wrong); layer_us is the mean layer time "
                f"over layers {layers[0]}-{layers[-1]} from the second run's trace")


if __name__ == "__main__":
    main()
