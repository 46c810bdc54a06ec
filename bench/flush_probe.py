"""How a timed decode step's L2 is emptied first, and what that costs each way of running it.

    python bench/flush_probe.py [--out DIR] [--model llama-1b] [--rounds 3] [--iters 30]

The judge and the benches flush L2 before every timed call by overwriting a buffer twice L2's size
(as triton.testing.do_bench does). That leaves L2 full of dirty lines, and the timed call writes
them back as its reads evict them. On the 1B expert the task probe shows layer 0 taking ~16 us more
than a steady layer, about the time 50 MB of write-back takes at 3 TB/s (task_probe_s23.json).
A decode loop starts no step that way. This bench times the same calls under each flush mode
(cuda.timing.FLUSH_MODES): "write" (the method behind every figure so far), "read" (cold and
clean) and "none" (each call right after the last, as a decode loop's steps run: the method of the
published Hazy / CUDA-graph comparison issue 15's target was set against, 127 dependent steps
timed back to back). The calls are the megakernel under its default, tuned and expert schedules,
and the two strongest baselines of bench/megakernel.py: the step in plain PyTorch under CUDA-graph
replay and torch.compile (transformers' LlamaForCausalLM, 2.1x slower than compiled plain PyTorch
there, is left out: in this bench its CUDA graph hit a device-side assert on an H100, which ends
the process's CUDA context; 2026-11-27). Every way
under every mode alternates in each round. Writes flush_probe.json: per way and mode, the median
of the rounds' medians and each round's numbers; per mode, the fastest baseline against the
expert; and each GPU's issue-15 target under each mode.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel import latency_targets, rel_err  # noqa: E402
from megakernel_gym.compiler import ZOO, capture, module_tensors  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, copy_bandwidth_gbs, time_us  # noqa: E402
from megakernel_gym.compiler.zoo import PlainStep  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402
from megakernel_gym.cuda.timing import FLUSH_MODES, capture_cuda_graph  # noqa: E402

BASELINES = ("plain_cuda_graph", "plain_torch_compile")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    bw = copy_bandwidth_gbs()
    model, inputs = ZOO[args.model](device="cuda")
    graph = capture(*ZOO[args.model](device="meta"), args.model)
    base = make_ir(graph, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    weight_bytes = sum(t.numel() * t.element_size() for t in dict(model.named_parameters()).values())
    floor_us = weight_bytes / (bw * 1e9) * 1e6
    params, feeds = module_tensors(model), dict(zip(graph.inputs, inputs))
    calls, errs = {}, {}
    with torch.no_grad():   # the float32 truth from a copy (its caches too: the step writes one row)
        truth = copy.deepcopy(model).float()(*[x.float() if x.is_floating_point() else x for x in inputs])
    for key, ir in (("megakernel_expert", apply_edits(base, expert_edits(base))),
                    ("megakernel", apply_edits(base, tuned_edits(base))), ("megakernel_default_schedule", base)):
        launch = Megakernel(ir.plan()).bind(params, feeds)
        launch()
        launch.check()
        errs[key] = rel_err(launch.outputs()[graph.outputs[0]], truth)
        calls[key] = launch
    with torch.no_grad():
        plain = PlainStep(model)
        calls["plain_cuda_graph"] = capture_cuda_graph(torch, plain, [x.clone() for x in inputs]).replay
        compiled = torch.compile(plain, mode="reduce-overhead")
        for _ in range(3):
            compiled(*inputs)
        calls["plain_torch_compile"] = lambda: compiled(*inputs)
        runs = {(k, m): [] for k in calls for m in FLUSH_MODES}
        order = list(runs)
        for r in range(args.rounds):   # every (way, mode) once a round, the order rotated by one each round
            for key, mode in order[r % len(order):] + order[:r % len(order)]:
                runs[(key, mode)].append(time_us(calls[key], args.iters, flush=mode))
                print(f"round {r} {key:28s} flush={mode:5s} {runs[(key, mode)][-1]['median_us']:8.1f} us", flush=True)
    med = {k: statistics.median(t["median_us"] for t in v) for k, v in runs.items()}
    rows = [{"way": key, "flush": mode, "median_us": med[(key, mode)],
             "round_medians_us": [round(t["median_us"], 1) for t in runs[(key, mode)]],
             "round_p10_p90_us": [(round(t["p10_us"], 1), round(t["p90_us"], 1)) for t in runs[(key, mode)]],
             "floor_share": floor_us / med[(key, mode)], "rel_err_vs_fp32": errs.get(key)} for key, mode in runs]
    summary, targets = [], []
    for mode in FLUSH_MODES:
        fastest = min(BASELINES, key=lambda k: med[(k, mode)])
        summary.append({"flush": mode, "megakernel_expert_us": med[("megakernel_expert", mode)],
                        "fastest_baseline": fastest, "fastest_baseline_us": med[(fastest, mode)],
                        "expert_over_fastest_baseline": med[(fastest, mode)] / med[("megakernel_expert", mode)]})
        print(f"flush={mode:5s} expert {summary[-1]['megakernel_expert_us']:7.1f} us, {fastest} "
              f"{summary[-1]['fastest_baseline_us']:7.1f} us: x{summary[-1]['expert_over_fastest_baseline']:.3f}",
              flush=True)
        if args.model == "llama-1b":   # issue 15's target rows, as bench/megakernel.py writes them
            targets += latency_targets(torch.cuda.get_device_name(), med[("megakernel_expert", mode)], mode)
    write("probe", rows + summary, targets, Path(args.out), prefix="flush_",
          notes=f"model {args.model} on {torch.cuda.get_device_name()}; floor {floor_us:.0f} us at {bw:.0f} GB/s device "
                "copy; each round times every way under every flush mode once (cuda.timing.time_gpu, "
                f"{args.iters}+ calls each), the order rotated by one per round; the last rows compare the expert "
                "with the fastest plain-PyTorch baseline under each mode")


if __name__ == "__main__":
    main()
