"""Batched bf16 steps with x read from two planes per row (codegen.X_PLANES) against the natural
layout, alternating rounds on one GPU: the expert schedule of each problem.

    python bench/x_planes.py [--problems NAME ...] [--rounds 3]

Writes x_planes.json: per problem the median over rounds of each build's median (with spread), the
sim's prediction, and whether both builds give the same bits.
"""
from __future__ import annotations

import argparse
import statistics
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

    from families_gpu import problem_ir

    from megakernel_gym.compiler import codegen, module_tensors, predict
    from megakernel_gym.compiler.runtime import Megakernel, time_us
    from megakernel_gym.compiler.zoo import make_block
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.policies.expert import expert_edits
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in args.problems:
        mod, cfg, g, ir0 = problem_ir(name, sms)
        ir = apply_edits(ir0, expert_edits(ir0))
        model, inputs = make_block(mod.block, cfg, seed=0, device="cuda")
        params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
        launches, outs = {}, {}
        for planes in (False, True):
            codegen.X_PLANES = planes
            launches[planes] = Megakernel(ir.plan()).bind(params, feeds)
            launches[planes]()
            launches[planes].check()
            outs[planes] = {k: v.clone() for k, v in launches[planes].outputs().items()}
        codegen.X_PLANES = True
        same = all(torch.equal(outs[False][k], outs[True][k]) for k in outs[True])
        times = {p: [] for p in launches}
        for _ in range(args.rounds):
            for p in (False, True):
                times[p].append(time_us(launches[p], 30))
        row = {"problem": name, "batch": cfg.batch, "same_bits": same,
               "predicted_us": round(predict(ir.plan(), "H200" if "H200" in torch.cuda.get_device_name(0) else "H100").latency_us, 1)}
        for p, label in ((False, "natural"), (True, "planes")):
            row[label] = {"median_us": round(statistics.median(t["median_us"] for t in times[p]), 1),
                          "p10_us": round(min(t["p10_us"] for t in times[p]), 1),
                          "p90_us": round(max(t["p90_us"] for t in times[p]), 1)}
        row["ratio"] = round(row["natural"]["median_us"] / row["planes"]["median_us"], 3)
        rows.append(row)
        print(row, flush=True)
        del launches, model, params
        torch.cuda.empty_cache()
    targets = [{"target": "x planes give the same bits as the natural layout", "met": all(r["same_bits"] for r in rows)}]
    write("x_planes", rows, targets, Path(args.out), prefix="",
          notes="the expert schedule of each problem, built with codegen.X_PLANES off and on, timed in alternating rounds")


if __name__ == "__main__":
    main()
