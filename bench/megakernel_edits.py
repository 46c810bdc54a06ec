"""Schedule edits against the measurement: the same model's megakernel under several edit batches.

    python bench/megakernel_edits.py [--out DIR] [--model llama-1b] [--iters 30] [--timelines]

Each variant is a batch of IR edits (the agent's language) applied to the default schedule. For
each: the sim backend's prediction, the measured median and spread, the relative L2 error of the
output against eager PyTorch, and the share of the measured-bandwidth floor. Writes
megakernel_edits.json (and with --timelines one PNG per variant), so a change to the default
schedule or to the code generator is judged side by side in one run.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import ZOO, capture, module_tensors  # noqa: E402
from megakernel_gym.compiler.costmodel import predict  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, copy_bandwidth_gbs, time_us  # noqa: E402
from megakernel_gym.env.timeline import save_png, timeline_image  # noqa: E402
from megakernel_gym.ir_exposure import make_ir  # noqa: E402
from megakernel_gym.ir_exposure.edits import apply_edits, tuned_edits  # noqa: E402

MATMULS = ["layers.*.attn.q_proj", "layers.*.attn.k_proj", "layers.*.attn.v_proj", "layers.*.attn.o_proj",
           "layers.*.mlp.gate_proj", "layers.*.mlp.up_proj", "layers.*.mlp.down_proj", "lm_head"]


def prefetch(depth: int) -> str:
    return "\n".join(f"prefetch {m} depth={depth}" for m in MATMULS)


def fusions(graph, pairs) -> str:
    """`fuse` lines for every layer: pairs of (producer suffix, consumer suffix) within a scope."""
    names = {o.name for o in graph.ops}
    lines = []
    for o in graph.ops:
        for prod, cons in pairs:
            if o.name.endswith("." + prod):
                scope = o.name[: -len(prod) - 1]
                consumer = f"{scope}.{cons}" if f"{scope}.{cons}" in names else None
                if consumer:
                    lines.append(f"fuse {o.name} into {consumer}")
    return "\n".join(lines)


MLP_O = [("gate_proj", "silu_mul"), ("up_proj", "silu_mul"), ("down_proj", "add"), ("o_proj", "add")]
ROPE = [("k_rope", "k_cache_write"), ("q_rope", "decode_attention")]
KV_CHAIN = [("k_proj", "k_rope"), ("v_proj", "v_cache_write")]
WIDE_QKV = "tile layers.*.attn.q_proj n=32\ntile layers.*.attn.k_proj n=16\ntile layers.*.attn.v_proj n=16"
ADD_OP_COUNTERS = "counter layers.*.attn.add op\ncounter layers.*.mlp.add op"

VARIANTS = {
    "default": "",
    "tuned (the compiler's tuned_edits)": "TUNED",
    "prefetch=2": prefetch(2),
    "half the SMs": "assign * sms=0-65",
    "fused mlp and o_proj": MLP_O,
    "fused mlp, o_proj, k/v chain": MLP_O + ROPE + KV_CHAIN,
    "fused F = mlp, o_proj, ropes": MLP_O + ROPE,
    "F, prefetch=1": [prefetch(1)] + MLP_O + ROPE,
    "F, prefetch=2": [prefetch(2)] + MLP_O + ROPE,
    "F, prefetch=3": [prefetch(3)] + MLP_O + ROPE,
    "F, prefetch=2, wide qkv tiles": [prefetch(2), WIDE_QKV] + MLP_O + ROPE,
    "F, prefetch=2, op counters on adds": [prefetch(2), ADD_OP_COUNTERS] + MLP_O + ROPE,
    "F, op counters on adds": [ADD_OP_COUNTERS] + MLP_O + ROPE,
    "F, prefetch=4, op counters on adds": [prefetch(4), ADD_OP_COUNTERS] + MLP_O + ROPE,
    "tuned, prefetch=1": ["TUNED", prefetch(1)],
    "tuned, prefetch=2": ["TUNED", prefetch(2)],
    "tuned, prefetch=4": ["TUNED", prefetch(4)],
}


def layer_profile(plan, start, finish, layer: int) -> list[str]:
    """One line per op of one layer (and the ops after the last layer): when its first task
    started and its last finished, relative to the layer's first start, and its median task time.
    This is what says whether a layer is bound by streaming or by the chain of waits."""
    by_op: dict[str, list[int]] = {}
    for t in plan.tg.tasks:
        by_op.setdefault(t.op, []).append(t.id)
    prefix = f"layers.{layer}."
    names = [n for n in by_op if n.startswith(prefix)]
    if not names:
        return []
    t0 = min(start[i] for n in names for i in by_op[n])
    lines = []
    for n in names:
        ids = by_op[n]
        d = sorted(finish[i] - start[i] for i in ids)
        lines.append(f"{n[len(prefix):]:24s} tasks {len(ids):4d}  {min(start[i] for i in ids) - t0:7.1f} .. "
                     f"{max(finish[i] for i in ids) - t0:7.1f} us  task median {d[len(d) // 2]:6.2f} max {d[-1]:6.2f}")
    return lines


def rel_err(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def load_step(model_name: str) -> SimpleNamespace:
    """A zoo model (or a level-5 problem at its GPU sizes) on the GPU with what every schedule of it is
    measured against: its graph and tensors, the eager bf16 output and the float32 truth (the same weights, upcast), the floor
    (weight bytes over the device copy bandwidth measured now), and `base`, its default IR on this
    GPU's SMs (what every schedule's edits apply to)."""
    bw = copy_bandwidth_gbs()
    if model_name in ZOO:
        model, inputs = ZOO[model_name](device="cuda")
        graph = capture(*ZOO[model_name](device="meta"), model_name)
    else:       # a level-5 problem (mk_gpt2_large_batch2, ...) at its GPU sizes, seed 0
        from families_gpu import problem_ir
        from megakernel_gym.compiler.zoo import make_block
        mod, cfg, graph, _ = problem_ir(model_name, 1)
        model, inputs = make_block(mod.block, cfg, seed=0, device="cuda")
    weight_bytes = sum(t.numel() * t.element_size() for t in dict(model.named_parameters()).values())
    with torch.no_grad():
        ref = model(*inputs)
        truth = copy.deepcopy(model).float()(*[x.float() if x.is_floating_point() else x for x in inputs])
    base = make_ir(graph, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    return SimpleNamespace(bw=bw, graph=graph, base=base, weight_bytes=weight_bytes,
                           floor_us=weight_bytes / (bw * 1e9) * 1e6,
                           params=module_tensors(model), feeds=dict(zip(graph.inputs, inputs)), ref=ref, truth=truth,
                           eager_err=rel_err(ref, truth))


NAMED_SCHEDULES = ("expert", "tuned", "default")     # the schedules named_edits spells out


def named_edits(base, schedule: str, as_of: str | None = None) -> str:
    """The edit text of a named schedule (NAMED_SCHEDULES) for `base`: "expert", "tuned" (the compiler's
    tuned_edits) or "default" (none). The schedules ab_knobs.py builds by name, and bench/sim_score.py prices
    (the expert as it was on `as_of`, the day a row was timed: policies.expert.levers_as_of)."""
    from megakernel_gym.policies.expert import expert_edits, levers_as_of
    return {"expert": lambda: expert_edits(base, levers=levers_as_of(as_of)), "tuned": lambda: tuned_edits(base),
            "default": lambda: ""}[schedule]()


def schedule_file(base, path: str, as_of: str | None = None) -> str:
    """A file of edit lines as edit text for `base`: a line TUNED stands for the compiler's
    tuned_edits, EXPERT for the expert's edits (both spelled out for `base`; the expert as on `as_of`)."""
    named = {"TUNED": "tuned", "EXPERT": "expert"}
    return "\n".join(named_edits(base, named[ln.strip()], as_of) if ln.strip() in named else ln
                     for ln in Path(path).read_text().splitlines())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    ap.add_argument("--timelines", action="store_true", help="save each variant's per-SM timeline as a PNG")
    ap.add_argument("--modes", nargs="*", default=["bulk"], help="prefetch instruction(s) to compare: bulk, idle, lines")
    ap.add_argument("--extra", nargs="*", default=[], metavar="LABEL=FILE",
                    help="more variants: a label and a file of edits (a line TUNED stands for tuned_edits, "
                         "EXPERT for expert_edits: schedule_file)")
    ap.add_argument("--profile-layer", type=int, default=5, help="the layer whose ops are profiled per variant")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    step = load_step(args.model)
    bw, graph, weight_bytes, floor_us = step.bw, step.graph, step.weight_bytes, step.floor_us
    params, feeds, ref, truth, eager_err = step.params, step.feeds, step.ref, step.truth, step.eager_err
    base = step.base
    for spec in args.extra:
        label, _, path = spec.partition("=")
        VARIANTS[label] = schedule_file(base, path)
    rows = []
    runs = [(name, edits, mode) for mode in args.modes for name, edits in VARIANTS.items()
            if not args.only or name in args.only]
    for name, edits, mode in runs:
        if mode != "bulk":
            name = f"{name} [{mode} prefetch]"
        t0 = time.perf_counter()
        if isinstance(edits, str):
            edits = [edits]
        # TUNED stands for the compiler's tuned_edits; per-layer fusions are spelled out from op names
        edits = "\n".join(tuned_edits(base) if e == "TUNED" else e if isinstance(e, str) else fusions(graph, [e])
                          for e in edits if e)
        ir = apply_edits(base, edits) if edits else base
        plan = ir.plan()
        predicted = predict(plan, "H200" if "H200" in torch.cuda.get_device_name() else "H100").latency_us
        mk = Megakernel(plan, prefetch_mode=mode)
        launch = mk.bind(params, feeds, trace=True)
        launch()
        launch.check()
        err = rel_err(launch.outputs()[graph.outputs[0]], ref)
        err_truth = rel_err(launch.outputs()[graph.outputs[0]], truth)
        timed = mk.bind(params, feeds)          # timed without the in-kernel trace
        t = time_us(timed, args.iters)
        row = {"variant": name, "prefetch_mode": mode, "edits": edits, "tasks": len(plan.tg.tasks), "predicted_us": predicted,
               "megakernel": t, "rel_l2_err_vs_eager": err, "rel_l2_err_vs_fp32": err_truth,
               "floor_share": floor_us / t["median_us"],
               "build_s": time.perf_counter() - t0}
        rows.append(row)
        print(f"{name:36s} {t['median_us']:9.1f} us  (p10 {t['p10_us']:.1f}, p90 {t['p90_us']:.1f})  "
              f"floor {row['floor_share']:.1%}  predicted {predicted:.0f} us  err {err:.2e}", flush=True)
        start, finish = launch.task_times_us()
        row["layer_profile"] = layer_profile(plan, start, finish, args.profile_layer)
        for line in row["layer_profile"]:
            print("   ", line, flush=True)
        if args.timelines:
            slug = "".join(c if c.isalnum() else "_" for c in name)
            save_png(timeline_image(plan, SimpleNamespace(start_us=start, finish_us=finish)),
                     str(out / f"megakernel_edits_{slug}.png"))
        del launch, timed, mk
    best = min(rows, key=lambda r: r["megakernel"]["median_us"])
    worst = max(rows, key=lambda r: r["megakernel"]["median_us"])
    targets = [{"target": "edits move the measured latency (slowest / fastest variant > 1.2)",
                "measured": round(worst["megakernel"]["median_us"] / best["megakernel"]["median_us"], 3),
                "met": worst["megakernel"]["median_us"] / best["megakernel"]["median_us"] > 1.2},
               {"target": "every variant as close to the float32 truth as eager bf16 (relative L2 error <= 1.5x "
                          "eager's)", "measured": max(r["rel_l2_err_vs_fp32"] for r in rows),
                "eager": eager_err, "met": all(r["rel_l2_err_vs_fp32"] <= max(1.5 * eager_err, 1e-3) for r in rows)}]
    write("edits", rows, targets, out, prefix="megakernel_",
          notes=f"model {args.model}; floor {floor_us:.0f} us from {weight_bytes} weight bytes at the device copy "
                f"bandwidth measured in this run ({bw:.0f} GB/s)")


if __name__ == "__main__":
    main()
