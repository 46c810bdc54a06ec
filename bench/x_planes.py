"""Batched bf16 steps with x read from two planes per row (codegen.knobs.X_PLANES) against the natural
layout, alternating rounds on one GPU: the expert schedule of each problem.

    python bench/x_planes.py [--problems NAME ...] [--rounds 3]

Writes x_planes.json: per problem the median over rounds of each build's median (with spread), the
sim's prediction, and whether both builds give the same bits.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from judge_bench import write  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="*", default=["mk_qwen2_1p5b_batch4", "mk_gpt2_large_batch2",
                                                      "mk_mistral_window_batch2", "mk_mixtral_moe",
                                                      "mk_llama_decode_batch4", "mk_qwen2_0p5b"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    import torch

    from families_gpu import device_key, problem_ir, problem_launches, time_alternating

    from megakernel_gym.compiler import codegen, predict
    from megakernel_gym.compiler.runtime import Megakernel
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.policies.expert import expert_edits
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in args.problems:
        mod, cfg, g, ir0 = problem_ir(name, sms)
        ir = apply_edits(ir0, expert_edits(ir0))

        def build(planes):
            def make():
                codegen.knobs.X_PLANES = planes
                return Megakernel(ir.plan())
            return make
        launches, outs, _ = problem_launches(mod, cfg, g, {False: build(False), True: build(True)})
        codegen.knobs.X_PLANES = True
        same = all(torch.equal(outs[False][k], outs[True][k]) for k in outs[True])
        timed = time_alternating(launches, args.rounds)
        row = {"problem": name, "batch": cfg.batch, "same_bits": same,
               "predicted_us": round(predict(ir.plan(), device_key()).latency_us, 1),
               "natural": timed[False], "planes": timed[True]}
        row["ratio"] = round(row["natural"]["median_us"] / row["planes"]["median_us"], 3)
        rows.append(row)
        print(row, flush=True)
        del launches
        torch.cuda.empty_cache()
    targets = [{"target": "x planes give the same bits as the natural layout", "met": all(r["same_bits"] for r in rows)}]
    write("x_planes", rows, targets, Path(args.out), prefix="",
          notes="the expert schedule of each problem, built with codegen.knobs.X_PLANES off and on, timed in alternating rounds")


if __name__ == "__main__":
    main()
