"""The transformers-family level-5 problems on the GPU: each one's expert schedule through the
level-5 judge (rewards/megakernel.py: 3 seeds against the float32 truth, timed against the default
schedule, eager PyTorch and CUDA-graph replay of the adapted transformers model).

    python bench/families_gpu.py [--problems NAME ...] [--out DIR] [--name families_gpu]

Writes <name>.json: per problem the judge's status and reason, the expert's and the baselines'
medians with spread, the speedups, the per-seed errors, and the sim's prediction for both
schedules (so the prediction's error on families it was not fitted on can be read off). Targets:
every expert correct on every seed.
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402

FAMILY_PROBLEMS = ("mk_hf_llama_1b", "mk_hf_smollm2_360m", "mk_qwen2_0p5b", "mk_qwen2_1p5b_batch4",
                   "mk_qwen3_0p6b", "mk_qwen3_1p7b", "mk_mistral_window", "mk_mistral_window_batch2")


def problem_ir(name: str, num_sms: int):
    """(problem module, its config, its graph captured on the meta device, the default IR) of a level-5
    problem at its GPU sizes."""
    from megakernel_gym.compiler import capture
    from megakernel_gym.compiler.zoo import make_block, step_config
    from megakernel_gym.ir_exposure import make_ir
    mod = importlib.import_module(f"megakernel_gym.curriculum.problems.{name}")
    cfg = step_config(mod.block, mod.config)
    g = capture(*make_block(mod.block, cfg, device="meta"), name)
    return mod, cfg, g, make_ir(g, num_sms=num_sms)


def problem_launches(mod, cfg, g, builds: dict) -> tuple[dict, dict, list]:
    """A family problem's model on the GPU (seed 0) and, for each build (key -> a callable giving a
    runtime.Megakernel), that megakernel bound to it, run once and checked: (launches, their
    outputs, the step's inputs). What bench/families_split.py and bench/x_planes.py time."""
    from megakernel_gym.compiler import module_tensors
    from megakernel_gym.compiler.zoo import make_block
    model, inputs = make_block(mod.block, cfg, seed=0, device="cuda")
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    launches, outs = {}, {}
    for key, build in builds.items():
        launches[key] = build().bind(params, feeds)
        launches[key]()
        launches[key].check()
        outs[key] = {k: v.clone() for k, v in launches[key].outputs().items()}
    return launches, outs, inputs


def time_alternating(launches: dict, rounds: int, iters: int = 30) -> dict:
    """Each launch timed once per round, rounds alternating between them: per key the median of the
    rounds' medians, the lowest p10 and the highest p90 (us)."""
    from megakernel_gym.compiler.runtime import time_us
    times = {k: [] for k in launches}
    for _ in range(rounds):
        for k, launch in launches.items():
            times[k].append(time_us(launch, iters))
    return {k: {"median_us": round(statistics.median(t["median_us"] for t in ts), 1),
                "p10_us": round(min(t["p10_us"] for t in ts), 1),
                "p90_us": round(max(t["p90_us"] for t in ts), 1)} for k, ts in times.items()}


def device_key() -> str:
    """The cost model's device for the GPU here."""
    import torch
    return "H200" if "H200" in torch.cuda.get_device_name(0) else "H100"


def run_one(name: str, num_sms: int, sim_device: str) -> dict:
    from megakernel_gym.compiler import predict
    from megakernel_gym.curriculum import builtin_suite
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.policies.expert import expert_edits
    from megakernel_gym.rewards.megakernel import MegakernelJudge
    problem = builtin_suite().get(name)
    t0 = time.perf_counter()
    mod, _, _, ir0 = problem_ir(name, num_sms)
    text = expert_edits(ir0)
    expert = apply_edits(ir0, text)
    plan_s = time.perf_counter() - t0
    pred = {k: round(predict(ir.plan(), sim_device).latency_us, 1) for k, ir in (("default", ir0), ("expert", expert))}
    t0 = time.perf_counter()
    with MegakernelJudge(mod.block, mod.config, ir0.plan(), timeout_s=600.0) as judge:
        res = judge.evaluate(expert.plan(), {}, problem)
    row = {"problem": name, "family": mod.FAMILY, "split": mod.SPLIT, "tasks": len(ir0.plan().tg.tasks),
           "status": res.status, "reason": res.reason[:600], "timing": res.timing, "baselines": res.baselines,
           "speedups": getattr(res, "speedups", None), "seeds": res.seeds, "predicted_us": pred,
           "expert_edit_lines": len(text.splitlines()), "plan_s": round(plan_s, 1),
           "judge_s": round(time.perf_counter() - t0, 1)}
    print(f"{name}: {res.status} {res.reason[:300]}", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="*", default=list(FAMILY_PROBLEMS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--name", default="families_gpu")
    args = ap.parse_args()
    import torch
    props = torch.cuda.get_device_properties(0)
    rows = []
    for name in args.problems:
        try:
            rows.append(run_one(name, props.multi_processor_count, device_key()))
        except Exception as e:  # noqa: BLE001 - one problem's failure is a row, the rest still run
            rows.append({"problem": name, "status": "bench_error", "reason": f"{type(e).__name__}: {e}"[:1000]})
            print(f"{name}: bench_error {e}", flush=True)
    targets = [{"target": "every family problem's expert schedule correct on every seed (GPU judge)",
                "value": sum(r["status"] == "correct" for r in rows), "of": len(rows),
                "met": all(r["status"] == "correct" for r in rows)}]
    write(args.name, rows, targets, Path(args.out), prefix="",
          notes="the adapted transformers models (compiler/families.py) at the problems' GPU sizes")


if __name__ == "__main__":
    main()
