"""What a decode step's attention costs by the positions it attends: each family's default, expert and
the adversary's worst searched schedule (bench/results/sim_adversary.json), run at several cached
positions (pos, so the attention reads pos + 1 positions of each KV row), whole step timed and
each attention task's phases probed (emit_cuda probes=True), beside the sim's prediction at the
same positions.

    python bench/attention_positions.py [--targets llama-1b mk_qwen3_0p6b ...] [--fractions 0 0.25 0.5 1]
                                        [--runs 3] [--iters 20] [--out DIR]

Per row (target, schedule, pos): the step's time (median, p10, p90), the relative L2 error against
the float32 model at that position, and over the attention tasks of every layer (medians over the
tasks and runs): `work` (first + rows: its first scores in -> its outputs or partials out, the
positions' cost), `busy` (start -> signal), `input` and `tail`; the attention op's window in its
layer; and the sim's prediction with the positions given (costmodel.predict(positions=...)).
The judge draws pos uniformly in [0, max_seq) (families.family_inputs), so a step's expected cost is
its cost at the middle of the cache where it is linear in pos: this file says whether it is.
Writes attention_positions.json.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_edits import rel_err  # noqa: E402
from sim_adversary import TARGETS, expert_of, load_step, row_ir, target_ir  # noqa: E402
from task_probe import layer_key, phases, probed_runs  # noqa: E402
from megakernel_gym.compiler.costmodel import DEVICES, positions_input, predict  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.cuda.timing import L2Flusher  # noqa: E402


def worst_climb(target: str) -> dict | None:
    """The adversary file's searched row of `target` whose sim speedup over the expert is furthest from
    the GPU's (None if the file has none)."""
    path = ROOT / "bench" / "results" / "sim_adversary.json"
    if not path.exists():
        return None
    rows = [r for r in json.loads(path.read_text())["rows"] if r["target"] == target
            and r["label"].startswith("climb") and r.get("correct") and r.get("gpu_speedup_vs_expert")]
    return max(rows, key=lambda r: abs(r["sim_speedup_vs_expert"] / r["gpu_speedup_vs_expert"] - 1), default=None)


def schedule_ir(target: str, num_sms: int, which):
    """The IR `which` names: "default", "expert", or an adversary file's row (sim_adversary.row_ir)."""
    _, base = target_ir(target, num_sms)
    if which == "default":
        return base
    return expert_of(base) if which == "expert" else row_ir(which, num_sms, ())


def compile_job(job: tuple) -> float:
    """Compile one schedule's megakernel, plain or with probes, into NVRTC's on-disk cache (a pool
    worker, no GPU), so the measuring process finds it there."""
    target, num_sms, which, probes, arch = job
    from megakernel_gym.compiler.codegen import emit_cuda
    from megakernel_gym.cuda.nvrtc import CudaCompileError, compile_cuda
    t0 = time.perf_counter()
    try:
        compile_cuda(emit_cuda(schedule_ir(target, num_sms, which).plan(), probes=probes)[0], "megakernel.cu", (),
                     arch, host_includes=False)
    except CudaCompileError:
        pass     # the measuring process compiles it again and says why
    return time.perf_counter() - t0


def attention_stats(plan, probes_runs, spans_runs) -> dict:
    """Medians over every layer's attention tasks and the runs: work (first + rows), busy, input,
    tail; and the attention op's window after its layer's first start (from, to)."""
    ids = [t.id for t in plan.tg.tasks if plan.tg.graph.op(t.op).kind == "decode_attention"]
    by_layer: dict[int, list[int]] = {}
    for t in plan.tg.tasks:
        layer = layer_key(t.op)[0]
        if layer is not None:
            by_layer.setdefault(layer, []).append(t.id)
    attn_layer: dict[int, list[int]] = {}
    for i in ids:
        attn_layer.setdefault(layer_key(plan.tg.tasks[i].op)[0], []).append(i)
    vals: dict[str, list[float]] = {k: [] for k in ("work", "busy", "input", "tail")}
    froms, tos = [], []
    for probes, spans in zip(probes_runs, spans_runs):
        for i in ids:
            ph = phases(probes[i])
            if "first" in ph or "rows" in ph:
                vals["work"].append(ph.get("first", 0.0) + ph.get("rows", 0.0))
            for k in ("busy", "input", "tail"):
                if k in ph:
                    vals[k].append(ph[k])
        for layer, a in attn_layer.items():
            t0 = min(spans[i][0] for i in by_layer[layer])
            froms.append(min(spans[i][0] for i in a) - t0)
            tos.append(max(spans[i][1] for i in a) - t0)
    out = {k: round(statistics.median(v), 3) if v else None for k, v in vals.items()}
    out["window_us"] = [round(statistics.median(froms), 2), round(statistics.median(tos), 2)] if froms else None
    return out


def rescore(path: Path, out_dir: Path) -> None:
    """CPU: a run's rows predicted again by the cost model as it is now (each keeps its run's as
    predicted_at_run_us); the measurements are the run's."""
    import datetime
    doc = json.loads(path.read_text())
    plans = {}
    for r in doc["rows"]:
        key = (r["target"], r["schedule"])
        if key not in plans:
            which = r["schedule"] if r["schedule"] in ("default", "expert") else {"label": r["schedule"], **r}
            plans[key] = schedule_ir(r["target"], 132, which).plan()
        plan = plans[key]
        r.setdefault("predicted_at_run_us", r["predicted_us"])
        n_seq = plan.tg.graph.tensors[positions_input(plan.tg.graph)].shape[0]
        pred = predict(plan, doc.get("sim_device", "H200"), positions=[r["pos"]] * n_seq)
        r["predicted_us"] = round(pred.latency_us, 2)
    doc["rescored"] = {"command": "python " + " ".join(sys.argv),
                       "date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "note": "predicted_us from the cost model at this date on the CPU; measured is the GPU run's"}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "attention_positions.json").write_text(json.dumps(doc, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="*", default=[t for t in TARGETS if t != "mk_mixtral_moe"])
    ap.add_argument("--fractions", nargs="*", type=float, default=[0.0, 0.125, 0.25, 0.5, 1.0],
                    help="positions as shares of the cache: pos = round(f * (max_seq - 1))")
    ap.add_argument("--runs", type=int, default=3, help="probed runs per position")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--rescore", default=None, metavar="RUN.json",
                    help="CPU: predict a run's rows again with the cost model as it is now")
    args = ap.parse_args()
    if args.rescore:
        return rescore(Path(args.rescore), Path(args.out))
    if any(not 0.0 <= f <= 1.0 for f in args.fractions):
        sys.exit(f"--fractions {args.fractions}: each must be in [0, 1] (a share of the cache)")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    gpu = torch.cuda.get_device_name()
    device = next((k for k in DEVICES if k in gpu), "H100")
    flush = L2Flusher(torch, torch.cuda.current_device())
    picks = {t: [("default", "default"), ("expert", "expert")]
             + ([(w["label"], w)] if (w := worst_climb(t)) else []) for t in args.targets}
    from megakernel_gym.cuda.nvrtc import _default_arch
    jobs = [(t, num_sms, which, probes, _default_arch()) for t, ps in picks.items() for _, which in ps
            for probes in (False, True)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 1), mp_context=get_context("spawn")) as pool:
        list(pool.map(compile_job, jobs, chunksize=1))
    print(f"compiled {len(jobs)} megakernels in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for target in args.targets:
        g, _ = target_ir(target, num_sms)
        _, params, feeds, _, _, model = load_step(target, pos="seed")
        att = next(o for o in g.ops if o.kind == "decode_attention")
        pos_name, s_max = att.inputs[3], g.tensors[att.inputs[1]].shape[2]
        truths: dict[int, tuple] = {}      # pos -> (float32 output, eager bf16's error against it)
        for label, which in picks[target]:
            plan = schedule_ir(target, num_sms, which).plan()
            t0 = time.perf_counter()
            mk, probed = Megakernel(plan), Megakernel(plan, probes=True)
            build_s = time.perf_counter() - t0
            for f in args.fractions:
                pos = round(f * (s_max - 1))
                at = dict(feeds, **{pos_name: torch.full_like(feeds[pos_name], pos)})
                if pos not in truths:
                    inputs = [at[n] for n in g.inputs]
                    with torch.no_grad():
                        fp32 = [x.float() if x.is_floating_point() else x for x in inputs]
                        truth = copy.deepcopy(model).float()(*fp32)
                        truths[pos] = truth, rel_err(model(*inputs), truth)
                truth, eager_err = truths[pos]
                launch = mk.bind(params, at)
                launch()
                launch.check()
                out = launch.outputs()[g.outputs[0]].float()
                err = rel_err(out, truth)
                t = time_us(launch, args.iters)
                plaunch = probed.bind(params, at, trace=True)
                runs, spans = probed_runs(plaunch, plaunch, len(plan.tg.tasks), args.runs, flush)
                row = {"target": target, "schedule": label, "pos": pos, "s_max": s_max, "fraction": f,
                       **({"start": which["start"], "edits_from_start": which["edits_from_start"]}
                          if isinstance(which, dict) else {}),
                       "measured": {k: round(v, 2) for k, v in t.items()},
                       "rel_l2_err_vs_fp32": err, "eager_err": eager_err,
                       "correct": err <= max(1.5 * eager_err, 1e-3) and bool(torch.isfinite(out).all()),
                       "attention": attention_stats(plan, runs, spans),
                       "predicted_us": round(predict(plan, device,
                                                     positions=[pos] * len(feeds[pos_name])).latency_us, 2),
                       "build_s": round(build_s, 1)}
                rows.append(row)
                a = row["attention"]
                print(f"{target[:20]:20s} {label[:24]:24s} pos {pos:5d}: {t['median_us']:8.1f} us "
                      f"(sim {row['predicted_us']:8.1f})  attention work {a['work']} busy {a['busy']} "
                      f"window {a['window_us']}  correct {row['correct']}", flush=True)
                del launch, plaunch
            del mk, probed
        torch.cuda.empty_cache()
    targets = [{"target": "every schedule correct at every position (relative L2 error <= 1.5x eager's)",
                "measured": sum(r["correct"] for r in rows), "of": len(rows), "met": all(r["correct"] for r in rows)}]
    write("attention_positions", rows, targets, Path(args.out), prefix="",
          notes=f"{gpu}; sim constants {device}; positions {args.fractions} of each cache; medians over "
                f"{args.runs} probed runs (L2 flushed) and every layer's attention tasks")


if __name__ == "__main__":
    main()
