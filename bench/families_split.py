"""How far a family problem's decode attention should be split: the expert schedule with its
attention split into N parts, measured against the sim's prediction, alternating rounds.

    python bench/families_split.py [--problems NAME ...] [--splits 1 4 8 16 32] [--rounds 3]

Few kv heads (Qwen2's 2) and several sequences (batch 4) leave an unsplit attention a handful of
tiles, each a long serial read; the expert's split_parts bounds parts by cached positions alone.
Writes families_split.json: per problem and split, the median over rounds of the megakernel's
median (with spread) and the H100 prediction.
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
    ap.add_argument("--problems", nargs="*", default=["mk_qwen2_1p5b_batch4", "mk_qwen2_0p5b", "mk_mistral_window_batch2"])
    ap.add_argument("--splits", nargs="*", type=int, default=[1, 4, 8, 16, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    import torch

    from families_gpu import device_key, problem_ir, problem_launches, time_alternating

    from megakernel_gym.compiler import predict
    from megakernel_gym.compiler.runtime import Megakernel
    from megakernel_gym.ir_exposure import apply_edits
    from megakernel_gym.policies.expert import expert_edits
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in args.problems:
        mod, cfg, g, ir0 = problem_ir(name, sms)
        attn = [o.name for o in g.ops if o.kind == "decode_attention"]
        base = apply_edits(ir0, expert_edits(ir0, levers=("inline", "wave", "cache")))
        irs = {n: apply_edits(base, "\n".join(f"split {a} n={n}" for a in attn)) if n > 1 else base
               for n in args.splits}
        launches, _, inputs = problem_launches(mod, cfg, g, {n: (lambda ir=ir: Megakernel(ir.plan()))
                                                             for n, ir in irs.items()})
        pred = {n: predict(ir.plan(), device_key()).latency_us for n, ir in irs.items()}
        timed = time_alternating(launches, args.rounds)
        for n in args.splits:
            rows.append({"problem": name, "split": n, **timed[n],
                         "predicted_us": round(pred[n], 1), "batch": cfg.batch, "kv_heads": cfg.kv_heads,
                         "max_seq": cfg.max_seq, "pos": [int(p) for p in inputs[-1].tolist()]})
            print(rows[-1], flush=True)
        del launches
        torch.cuda.empty_cache()
    write("families_split", rows, [], Path(args.out), prefix="",
          notes="the expert's levers (inline, wave, cache) with every decode attention split into N parts")


if __name__ == "__main__":
    main()
