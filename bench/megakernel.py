"""The megakernel against PyTorch on one decode step: eager, CUDA-graph replay, torch.compile.

    python bench/megakernel.py [--out DIR] [--models llama-tiny mlp-1b attention-1b llama-1b] [--iters 50] [--no-hf]

For each zoo model (seeded random weights, prefilled caches): median and spread of each way of
running one step -- the zoo model eager, under CUDA-graph replay and torch.compile; the same step in
fast plain PyTorch (compiler.zoo.PlainStep) under CUDA-graph replay and torch.compile; for the llama
models transformers' LlamaForCausalLM at the same shapes (static cache, CUDA graph; torch.compile
with --hf-compile);
and the megakernel. Each way's share of the measured-bandwidth floor (weight bytes / the
device-copy bandwidth measured in the same run). The megakernel runs three times: under the
compiler's default schedule, its tuned one (`tuned_edits`: fusions and counters, as edits) and the
expert's (policies/expert.py: tuned plus the levers, as edits); every output is checked against
the float32 truth and eager. Writes megakernel_decode.json and
megakernel_timeline.png (the per-SM timeline of one expert megakernel run of the last model, task
start/end read in-kernel from %globaltimer, with the op-kind legend).
"""
from __future__ import annotations

import argparse
import copy
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.compiler import ZOO, capture, module_tensors  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, copy_bandwidth_gbs  # noqa: E402
from megakernel_gym.compiler.runtime import time_us as _time_us  # noqa: E402
from megakernel_gym.compiler.zoo import PlainStep  # noqa: E402
from megakernel_gym.env.timeline import save_png, timeline_image, with_axes  # noqa: E402
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits  # noqa: E402
from megakernel_gym.policies.expert import expert_edits  # noqa: E402
from megakernel_gym.cuda.timing import FLUSH_MODES, capture_cuda_graph  # noqa: E402


# issue 15's latency targets for the 1B-shaped step's expert schedule, by the GPU they are set on
LATENCY_TARGETS_US = {"H100": 950.0, "H200": 700.0}


def latency_targets(device: str, expert_us: float, flush: str = "write") -> list[dict]:
    """The target row for the GPU this ran on (none on another GPU: a 950 us met on an H200 is not the
    H100's), naming the L2 flush the step was timed after where it is not the default's."""
    how = "" if flush == "write" else f", L2 flush '{flush}'"
    return [{"target": f"1B-shaped step (expert schedule) <= {us:.0f} us (issue 15, on an {gpu}){how}",
             "measured": round(expert_us, 1), "met": expert_us <= us}
            for gpu, us in LATENCY_TARGETS_US.items() if gpu in device]


def bench_model(name: str, iters: int, bw_gbs: float, hf: bool = True,
                hf_compile: bool = False, flush: str = "write") -> tuple[dict, object, object]:
    time_us = partial(_time_us, flush=flush)   # every way timed after the same L2 flush
    model, inputs = ZOO[name](device="cuda")
    graph = capture(*ZOO[name](device="meta"), name)
    default = make_ir(graph, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    tuned_text = tuned_edits(default)
    tuned = apply_edits(default, tuned_text) if tuned_text else default
    weight_bytes = sum(t.numel() * t.element_size() for t in dict(model.named_parameters()).values())
    floor_us = weight_bytes / (bw_gbs * 1e9) * 1e6
    row = {"model": name, "weight_bytes": weight_bytes, "floor_us": floor_us, "tuned_edits": len(tuned_text.splitlines())}
    with torch.no_grad():
        eager = lambda: model(*inputs)  # noqa: E731
        ref = eager()
        truth = copy.deepcopy(model).float()(*[x.float() if x.is_floating_point() else x for x in inputs])
        row["eager_rel_err_vs_fp32"] = rel_err(ref, truth)
        row["eager"] = time_us(eager, iters)
        g = capture_cuda_graph(torch, model, [x.clone() for x in inputs])
        row["cuda_graph"] = time_us(g.replay, iters)
        row["torch_compile"] = attempt(lambda: compiled_time(model, inputs, iters, truth, flush))
        # the same step in fast plain PyTorch (compiler.zoo.PlainStep), under CUDA-graph replay and compiled
        plain = PlainStep(model)
        row["plain_rel_err_vs_fp32"] = rel_err(plain(*inputs), truth)
        row["plain_cuda_graph"] = attempt(lambda: time_us(capture_cuda_graph(torch, plain, [x.clone() for x in inputs]).replay,
                                                          iters))
        row["plain_torch_compile"] = attempt(lambda: compiled_time(plain, inputs, iters, truth, flush))
        plain = None
        if name.startswith("llama") and hf and model.cfg.max_seq >= 256:
            # (llama-tiny's 32-slot cache ends in an index_copy_ device assert inside transformers' StaticCache,
            # seen on an H100 with transformers 5.17, which would end every later row's CUDA context)
            # transformers' LlamaForCausalLM at the same shapes: random init, static cache, 128 tokens prefilled
            try:
                step, static = hf_llama_step(model.cfg, "cuda")
                row["hf_cuda_graph"] = attempt(lambda: time_us(capture_cuda_graph(torch, step, static).replay, iters))
                if hf_compile:   # off by default: on an H100 it once hit a device-side assert in the static
                    # cache, which ends the process's CUDA context and with it every later row
                    row["hf_torch_compile"] = attempt(lambda: compiled_time(step, static, iters, flush=flush))
                del step, static
            except Exception as e:  # noqa: BLE001 - report, do not lose the other rows
                row["hf_cuda_graph"] = {"error": f"{type(e).__name__}: {e}"[:400]}
            torch.cuda.empty_cache()
    params, feeds = module_tensors(model), dict(zip(graph.inputs, inputs))
    launch = plan = None
    expert_text = expert_edits(default)
    expert = apply_edits(default, expert_text) if expert_text else default
    row["expert_edits"] = len(expert_text.splitlines())
    # the expert last: its traced run is the timeline drawn
    for key, ir in (("megakernel_default_schedule", default), ("megakernel", tuned), ("megakernel_expert", expert)):
        plan = ir.plan()
        mk = Megakernel(plan)
        launch = mk.bind(params, feeds, trace=True)       # one traced run: the output check and the timeline
        launch()
        launch.check()
        out = launch.outputs()[graph.outputs[0]]
        row[key] = time_us(mk.bind(params, feeds), iters)     # timed without the trace
        row[key].update(tasks=len(plan.tg.tasks), rel_err_vs_fp32=rel_err(out, truth), rel_err_vs_eager=rel_err(out, ref))
    for k in WAYS:
        if "median_us" in row.get(k, {}):
            row[k]["floor_share"] = floor_us / row[k]["median_us"]
    baselines = {k: row[k]["median_us"] for k in BASELINES if "median_us" in row.get(k, {})}
    row["fastest_baseline"] = min(baselines, key=baselines.get)
    row["megakernel_over_fastest_baseline"] = baselines[row["fastest_baseline"]] / row["megakernel"]["median_us"]
    row["expert_over_fastest_baseline"] = baselines[row["fastest_baseline"]] / row["megakernel_expert"]["median_us"]
    print(f"{name}: " + ", ".join(f"{k} {row[k]['median_us']:.1f} us" for k in WAYS if "median_us" in row.get(k, {}))
          + f"; floor {floor_us:.1f} us; fastest baseline {row['fastest_baseline']}", flush=True)
    return row, plan, launch


# every way of running a step that the bench times; all but the megakernel's are baselines
WAYS = ("eager", "cuda_graph", "torch_compile", "plain_cuda_graph", "plain_torch_compile", "hf_cuda_graph",
        "hf_torch_compile", "megakernel_default_schedule", "megakernel", "megakernel_expert")
BASELINES = WAYS[:-3]


def attempt(fn) -> dict:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a baseline that fails is reported, the other rows stand
        return {"error": f"{type(e).__name__}: {e}"[:400]}


def compiled_time(fn, inputs, iters: int, truth=None, flush: str = "write") -> dict:
    """torch.compile(mode="reduce-overhead"): inductor's kernels replayed as CUDA graphs; with `truth`,
    the compiled output's relative error against it is recorded too."""
    compiled = torch.compile(fn, mode="reduce-overhead")
    for _ in range(3):
        out = compiled(*inputs)
    err = rel_err(out[0] if isinstance(out, tuple) else out, truth) if truth is not None else None
    row = _time_us(lambda: compiled(*inputs), iters, flush=flush)
    if err is not None:
        row["rel_err_vs_fp32"] = err
    return row


def hf_llama_step(cfg, device, prefill: int = 128):
    """transformers' LlamaForCausalLM at a zoo LlamaConfig's shapes (random init, the config's dtype, SDPA)
    with a StaticCache of cfg.max_seq slots prefilled with `prefill` tokens: (step, static inputs), where
    step(token [B, 1], cache_position [1]) -> logits runs one decode step at position `prefill`."""
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM, StaticCache
    hc = HFConfig(vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
                  num_hidden_layers=cfg.layers, num_attention_heads=cfg.q_heads, num_key_value_heads=cfg.kv_heads,
                  head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq, rope_theta=cfg.rope_theta,
                  rms_norm_eps=cfg.eps, tie_word_embeddings=cfg.tie_embeddings, attn_implementation="sdpa")
    with torch.device(device):
        model = LlamaForCausalLM(hc).to(cfg.torch_dtype).eval()
    prefill = min(prefill, cfg.max_seq // 2)   # the step writes slot `prefill`: past the cache is a device assert
    cache = StaticCache(config=hc, max_cache_len=cfg.max_seq)
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, cfg.vocab, (cfg.batch, prefill), generator=gen).to(device)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prefill, device=device),
              use_cache=True)

    def step(token, cache_position):
        return model(input_ids=token, past_key_values=cache, cache_position=cache_position, use_cache=True).logits

    token = torch.randint(0, cfg.vocab, (cfg.batch, 1), generator=gen).to(device)
    return step, [token, torch.tensor([prefill], device=device)]


def rel_err(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--models", nargs="*", default=["llama-tiny", "mlp-1b", "attention-1b", "llama-1b"])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' LlamaForCausalLM baselines")
    ap.add_argument("--hf-compile", action="store_true", help="also torch.compile LlamaForCausalLM's step (last)")
    ap.add_argument("--flush", choices=FLUSH_MODES, default="write",
                    help="how L2 is emptied before each timed call (cuda.timing.FLUSH_MODES): 'write' (the "
                         "default, as the judge), 'read' (cold and clean), 'none' (back to back, as a decode loop); "
                         "another mode than 'write' writes megakernel_decode_flush_MODE.json and its timeline")
    args = ap.parse_args()
    name_of = "decode" if args.flush == "write" else f"decode_flush_{args.flush}"
    bw = copy_bandwidth_gbs()
    rows, last = [], None
    out = Path(args.out)
    for name in args.models:
        row, plan, launch = bench_model(name, args.iters, bw, hf=not args.no_hf, hf_compile=args.hf_compile,
                                        flush=args.flush)
        rows.append(row)
        last = (plan, launch)
        write(name_of, rows, [], out, notes="partial: written after each model", prefix="megakernel_", quiet=True)
    if last is not None:
        plan, launch = last
        start, finish = launch.task_times_us()
        measured = SimpleNamespace(start_us=start, finish_us=finish)
        save_png(with_axes(timeline_image(plan, measured), plan, measured,
                           f"{plan.tg.graph.name}: one megakernel run on {torch.cuda.get_device_name(0)}, task start/end "
                           "read in-kernel (%globaltimer), expert schedule"),
                 str(out / ("megakernel_timeline.png" if args.flush == "write" else f"megakernel_timeline_flush_{args.flush}.png")))
    big = next((r for r in rows if r["model"] == "llama-1b"), None)
    targets = [{"target": f"{r['model']}: megakernel as close to the float32 truth as eager bf16 (x1.5)",
                "measured": round(r[k]["rel_err_vs_fp32"], 5), "eager": round(r["eager_rel_err_vs_fp32"], 5),
                "met": r[k]["rel_err_vs_fp32"] <= max(1.5 * r["eager_rel_err_vs_fp32"], 1e-3)}
               for r in rows for k in ("megakernel_default_schedule", "megakernel", "megakernel_expert")]
    if big is not None and "median_us" in big["megakernel_expert"]:
        mk, cg = big["megakernel_expert"]["median_us"], big["cuda_graph"]["median_us"]
        targets += [{"target": "1B-shaped step (expert schedule) faster than CUDA-graph replay of eager PyTorch",
                    "measured": round(cg / mk, 3), "met": mk < cg},
                   {"target": "1B-shaped step (expert schedule) faster than the fastest baseline",
                    "baseline": big["fastest_baseline"], "measured": round(big["expert_over_fastest_baseline"], 3),
                    "met": big["expert_over_fastest_baseline"] > 1},
                   {"target": ">= 85% of the measured-bandwidth floor", "measured": round(big["floor_us"] / mk, 3),
                    "met": big["floor_us"] / mk >= 0.85}]
        targets += latency_targets(torch.cuda.get_device_name(0), mk, args.flush)
    write(name_of, rows, targets, out, notes=f"device copy bandwidth measured in this run: {bw:.0f} GB/s; every way "
          f"timed after the L2 flush '{args.flush}' (cuda.timing.FLUSH_MODES)", prefix="megakernel_")


if __name__ == "__main__":
    main()
