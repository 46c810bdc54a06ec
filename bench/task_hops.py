"""Where the sim and the GPU part, task by task (issue 39): a `task_probe.py --dump` run's tasks against
the sim's list schedule of the same plans. Per op of the layers, over the tasks whose SM was free when
their inputs were ready (on the GPU and in the sim alike), the median time from their last producer's
signal to their own: one hop and the task's work. The GPU's, the sim's and the difference say which
ops' hops or bodies the model prices wrong; the end-to-end rows of sim_adversary.json only say that it
does.

    python bench/task_hops.py bench/results/task_probe_llama_climb6_dump.json [--device-name H200]
                              [--layers 2 13] [--num-sms 132]

Reads the run's `<name>_tasks.json` beside it (every task, or some layers' with their ids). No GPU.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from task_probe import layer_key  # noqa: E402

from megakernel_gym.compiler.costmodel import predict  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run", help="a task_probe.py --dump result (its _tasks.json beside it)")
    ap.add_argument("--device-name", default="H200", help="the sim's constants")
    ap.add_argument("--layers", type=int, nargs=2, default=[2, 13], metavar=("FIRST", "LAST"))
    ap.add_argument("--num-sms", type=int, default=132, help="the SMs of the GPU the run measured")
    args = ap.parse_args()
    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    run = Path(args.run)
    doc = json.loads(run.read_text())
    dumps = {d["schedule"]: d["tasks"] for d in json.loads(run.with_name(run.stem + "_tasks.json").read_text())}
    argv = shlex.split(doc["command"])
    model = argv[argv.index("--model") + 1] if "--model" in argv else "llama-1b"
    if model in ZOO:
        graph = capture(*ZOO[model](device="meta"), model)
    else:
        from families_gpu import problem_ir
        graph = problem_ir(model, 1)[2]
    base = make_ir(graph, num_sms=args.num_sms)
    layers = range(args.layers[0], args.layers[1] + 1)
    for row in doc["rows"]:
        if row["schedule"] not in dumps:
            continue
        plan = apply_edits(base, row["edits"]).plan()
        pred = predict(plan, args.device_name)
        gpu = {t.get("id", i): (t["start_us"], t["signal_us"]) for i, t in enumerate(dumps[row["schedule"]])}
        table = ready_to_signal(plan, gpu, list(zip(pred.start_us, pred.finish_us)), layers)
        print(f"{row['schedule']}: {row['megakernel']['median_us']:.1f} us measured, {pred.latency_us:.1f} predicted "
              f"({args.device_name}); from the last producer's signal to the task's, medians (us):")
        for key, r in table.items():
            print(f"  {key:28s} {r['tasks']:5d} tasks  gpu {r['gpu_us']:6.2f}  sim {r['sim_us']:6.2f}  "
                  f"gpu - sim {r['gpu_minus_sim_us']:+6.2f}")


if __name__ == "__main__":
    main()
