"""Sim-backend speed (predictions per second) and IR size (tokens) for the tiny and 1B-shaped
Llama decoders.

    python bench/compiler_sim_bench.py [--out DIR]

Two rates per model: predict() on a plan already built (what a search over many candidate
schedules pays per candidate once costs are cached), and edit-to-prediction (build_plan from
knobs with one changed tile size, task costs, predict: what one env.step on sim pays).
Writes sim_predictions.json. Runs on the CPU; the device field names the CPU.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import ZOO, capture  # noqa: E402
from megakernel_gym.compiler.costmodel import predict, task_costs  # noqa: E402
from megakernel_gym.compiler.schedule import build_plan, default_knobs  # noqa: E402
from megakernel_gym.compiler.tasks import allowed_tiles  # noqa: E402


def _rate(fn, min_seconds: float) -> tuple[float, list[float]]:
    times = []
    t_end = time.perf_counter() + min_seconds
    while time.perf_counter() < t_end or len(times) < 3:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1.0 / statistics.median(times), times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    rows = []
    for name, device, seconds in (("llama-tiny", None, 3.0), ("llama-1b", "meta", 10.0)):
        m, inputs = ZOO[name](device=device) if device else ZOO[name]()
        g = capture(m, inputs, name)
        knobs = default_knobs(g, 132)
        plan = build_plan(g, knobs)
        costs = task_costs(plan)
        pred = predict(plan, "H200", costs)
        rate, times = _rate(lambda: predict(plan, "H200", costs), seconds / 2)
        op = next(o for o in knobs.order if "mlp.down_proj" in o)
        sizes = allowed_tiles(g.op(op), g.tensors[g.op(op).outputs[0]].shape[-1])
        k2 = knobs.copy()
        k2.tiles[op] = sizes[len(sizes) // 2]

        def edit_step():
            p = build_plan(g, k2)
            predict(p, "H200", task_costs(p))
        edit_rate, edit_times = _rate(edit_step, seconds / 2)
        from megakernel_gym.ir_exposure import count_tokens, make_ir, render
        text = render(make_ir(g, num_sms=132))
        row = {"model": name, "tasks": len(plan.tg.tasks), "ops": len(knobs.order),
               "ir_tokens": count_tokens(text), "ir_chars": len(text), "ir_lines": text.count("\n") + 1,
               "predict_per_s": round(rate, 1), "predict_ms_median": round(1e3 / rate, 3),
               "predict_ms_p90": round(1e3 * sorted(times)[int(0.9 * (len(times) - 1))], 3),
               "edit_to_prediction_per_s": round(edit_rate, 2), "edit_to_prediction_ms_median": round(1e3 / edit_rate, 2),
               "samples": [len(times), len(edit_times)],
               "predicted_latency_us_H200_default_schedule": round(pred.latency_us, 1),
               "floor_us_H200": round(pred.floor_us, 1)}
        rows.append(row)
        print(row, flush=True)
    tiny, big = rows
    write("sim_predictions", rows, [
        {"target": "thousands of predictions per second, tiny model", "measured": tiny["predict_per_s"],
         "met": tiny["predict_per_s"] >= 1000},
        {"target": "1B-shaped prediction well under a second", "measured": f"{big['predict_ms_median']} ms",
         "met": big["predict_ms_median"] < 500},
        {"target": "1B-shaped op-level IR within 4,000 tokens (regex tokens \\w+|[^\\w\\s])",
         "measured": big["ir_tokens"], "met": big["ir_tokens"] <= 4000}],
        Path(args.out), prefix="", notes=f"CPU: {platform.processor() or platform.machine()}, 1 thread (Python). "
                              "The device field is this machine; predictions are for an H200.")


if __name__ == "__main__":
    main()
