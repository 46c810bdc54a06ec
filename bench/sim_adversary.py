"""The sim's reward against an adversary (issue 39, item 2): hill-climb against the cost model as a
policy trained on the sim would, per model family, then measure what it found on a GPU beside the
expert, in one run.

    python bench/sim_adversary.py [--targets llama-1b mk_qwen3_0p6b ...] [--budget-s 120] [--restarts 6]
                                  [--from-default 3] [--seed 0] [--iters 20] [--workers N]
    python bench/sim_adversary.py --search-only [--save-search F]   # CPU: the search and its predictions only
    python bench/sim_adversary.py --searched F                      # the GPU run over a search made before
    python bench/sim_adversary.py --merge A.json B.json ...         # CPU: runs of different targets, one file
    python bench/sim_adversary.py --refit bench/results/sim_adversary.json [--fields A,B]  # CPU: fit the constants to its rows
    python bench/sim_adversary.py --rescore bench/results/sim_adversary.json # CPU: its rows under today's model

Targets: zoo models (llama-1b) and level-5 problems at their GPU sizes (mk_hf_smollm2_360m,
mk_gpt2_large_batch2, mk_qwen3_0p6b, mk_mixtral_moe: the families issue 39 found the sim fooled on).

Search, per target, in a pool of processes: `--restarts` annealed climbs from the expert schedule and
`--from-default` from the default (where an episode starts), each for budget_s / climbs seconds of
the sim (costmodel.predict with the shipped constants of the GPU it runs on). Each step proposes one
edit: any edit the edit language's fuzzer draws (edits.random_edit: any verb, any op, valid or not, on
one op or on that op of every layer), or one of the moves that fooled the sim before (sibling matmuls
unfused onto disjoint SM ranges, Mixtral's experts on SM groups: issue 39's per-op bandwidth pools).
A climb's best schedule is one of the searched; a climb from the default also gives its best after a
tenth and a third of its time (what a policy finds on its way, so the set spans the default to the
expert rather than near-ties of the expert alone).

Measure: the default, the expert, the known moves and the searched, each compiled (in the pool, into
NVRTC's cache) and run on the GPU, timed in rounds that alternate between schedules (median of the
rounds' medians), its output checked against the float32 truth as eager bf16 is. Targets, per
target and over all: every searched schedule's sim speedup over the expert within 5% of the GPU's,
Spearman >= 0.9 between predicted and measured (over schedules predicted at least 1% apart:
near-ties are timing noise), every schedule correct. Writes
bench/results/sim_adversary.json.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import re
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from megakernel_gym.compiler import ZOO, capture  # noqa: E402
from megakernel_gym.compiler.calibrate import sample_schedules, spearman  # noqa: E402
from megakernel_gym.compiler.costmodel import (DEVICES, costs_at, fed_positions, positions_input,  # noqa: E402
                                                predict)
from megakernel_gym.ir_exposure import apply_edits, make_ir  # noqa: E402
from megakernel_gym.ir_exposure.edits import EditError, random_edit  # noqa: E402
from megakernel_gym.ir_exposure.ir import IRError, render  # noqa: E402
from megakernel_gym.policies.expert import expert_edits, sibling_matmuls  # noqa: E402

SPEEDUP_TOLERANCE = 0.05
SPEARMAN_TARGET = 0.9
TARGETS = ("llama-1b", "mk_hf_smollm2_360m", "mk_gpt2_large_batch2", "mk_qwen3_0p6b", "mk_mixtral_moe")
SNAPSHOTS = (0.1, 0.33)
DISTINCT = 0.01              # predictions closer than this are one point for Spearman (near-ties: timing noise)      # a climb from the default also gives its best after these fractions of its time


def _every_layer(name: str) -> str:
    return ".".join("*" if p.isdigit() and i < len(name.split(".")) - 1 else p for i, p in enumerate(name.split(".")))


def known_moves(ir) -> dict[str, str]:
    """The moves that fooled the sim before issue 39's model changes (each predicted faster than the
    expert by per-op bandwidth pools), spelled for this IR's names: two sibling matmuls of every layer
    (gate/up, else q/k) unfused onto disjoint SM halves; a mixture's experts each on a group of SMs."""
    n = ir.knobs.num_sms
    moves = {}
    groups = [g for g in sibling_matmuls(ir) if len(g) >= 2]
    pair = next(([x for x in g if x.endswith(("gate_proj", "up_proj"))] for g in groups
                 if sum(x.endswith(("gate_proj", "up_proj")) for x in g) == 2), None) or (groups[0][:2] if groups else None)
    if pair:
        a, b = (_every_layer(x) for x in pair)
        lines = [f"unfuse {_every_layer(x)}" for x in pair if x in ir.fused]
        moves["siblings on disjoint halves"] = "\n".join(
            lines + [f"assign {a} sms=0-{n // 2 - 1}", f"assign {b} sms={n // 2}-{n - 1}"])
    experts = sorted({int(m.group(1)) for o in ir.ops for m in [re.search(r"expert_\w+\.(\d+)$", o)] if m})
    if experts:
        size = n // len(experts)
        lines = [f"unfuse {_every_layer(o)}" for o in ir.ops if ".layers.0." in f".{o}" and "expert_" in o
                 and o in ir.fused]
        for e in experts:
            lines += [f"assign *layers.*.mlp.expert_{kind}.{e} sms={e * size}-{(e + 1) * size - 1}"
                      for kind in ("gate", "up", "down")]
        moves["experts on SM groups"] = "\n".join(lines)
    return moves


def _per_op_pools(plan, device: str) -> float:
    """The prediction of the model before issue 39: each op's SMs share HBM among themselves alone."""
    import megakernel_gym.compiler.costmodel as cm
    rounds, cm.SPREAD_ROUNDS = cm.SPREAD_ROUNDS, 0
    try:
        return cm.predict(plan, device).latency_us
    finally:
        cm.SPREAD_ROUNDS = rounds


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def disjoint_siblings(ir, rng: random.Random) -> str:
    """Two sibling matmuls (q/k/v, gate/up) of every layer unfused and put on disjoint SM ranges."""
    groups = [g for g in sibling_matmuls(ir) if len(g) >= 2]
    if not groups:
        return random_edit(ir, rng)
    a, b = rng.sample(rng.choice(groups), 2)
    n = ir.knobs.num_sms
    cut = rng.randrange(n // 4, 3 * n // 4)
    lines = [f"unfuse {_every_layer(x)}" for x in (a, b) if x in ir.fused]
    return "\n".join(lines + [f"assign {_every_layer(a)} sms=0-{cut - 1}", f"assign {_every_layer(b)} sms={cut}-{n - 1}"])


LAYER = re.compile(r"(?<=\.)\d+(?=\.)")


def propose(ir, rng: random.Random) -> str:
    """One move: the fuzzer's edit on one op, or on that op of every layer (a policy's edits that pay
    repeat across layers), or the disjoint-siblings move, or one of known_moves."""
    if rng.random() < 0.25:
        moves = known_moves(ir)
        return rng.choice(list(moves.values())) if moves and rng.random() < 0.3 else disjoint_siblings(ir, rng)
    text = random_edit(ir, rng)
    return LAYER.sub("*", text) if rng.random() < 0.5 else text


def climb(start, device: str, seconds: float, rng: random.Random, temperature: float = 0.003,
          snapshots: tuple[float, ...] = ()) -> tuple[object, list[str], dict]:
    """Annealed hill-climb on the sim: an edit the sim predicts faster is kept, a slower one with
    probability exp(-slowdown / temperature) (relative), so a climb can cross a small ridge. Returns
    (the fastest IR seen other than `start`, however it compares with it, the edits that led there from
    `start`, counts). counts["snapshots"]: for each fraction f of `snapshots`, (f, the edits to the
    fastest seen by then, its predicted us)."""
    cur, cur_us, path = start, predict(start.plan(), device).latency_us, []
    best, best_us, best_path = None, math.inf, []      # the fastest schedule seen other than `start`
    tried = refused = 0
    t0 = time.perf_counter()
    t_end = t0 + seconds
    due, shots = sorted(snapshots), []
    while time.perf_counter() < t_end:
        while due and time.perf_counter() >= t0 + due[0] * seconds:
            shots.append((due.pop(0), list(best_path), best_us))
        text = propose(cur, rng)
        tried += 1
        try:
            cand = apply_edits(cur, text)
        except (EditError, IRError, ValueError):
            refused += 1
            continue
        us = predict(cand.plan(), device).latency_us
        if us < cur_us or rng.random() < math.exp(-(us / cur_us - 1) / temperature):
            cur, cur_us, path = cand, us, path + [text]
        if us < best_us and cand.text != start.text:
            best, best_us, best_path = cand, us, (path if cur is cand else path + [text])
    return best, best_path, {"tried": tried, "refused": refused, "kept": len(best_path), "predicted_us": best_us,
                             "snapshots": shots}


@functools.lru_cache(maxsize=None)
def target_ir(name: str, num_sms: int):
    """(graph on the meta device, default IR) of a zoo model or a level-5 problem at its GPU sizes."""
    if name in ZOO:
        g = capture(*ZOO[name](device="meta"), name)
    else:
        from families_gpu import problem_ir
        _, _, g, _ = problem_ir(name, num_sms)
    return g, make_ir(g, num_sms=num_sms)


def expert_of(base, as_of: str | None = None):
    """The expert on `base`, as it was on `as_of` (policies.expert.levers_as_of; None: as it is now)."""
    from megakernel_gym.policies.expert import levers_as_of
    return apply_edits(base, expert_edits(base, levers=levers_as_of(as_of)))


SAMPLED = "sampled: "


@functools.lru_cache(maxsize=None)
def sampled_irs(name: str, num_sms: int, n: int, seed: int) -> dict:
    """label -> IR of calibrate.sample_schedules(graph, n, seed) (the default left out): schedules of
    every kind that no climb is drawn to, so the measured set spans the model's whole range; a row
    names its schedule by label, and the same n and seed rebuild it (a refit of the model needs the plan)."""
    g, _ = target_ir(name, num_sms)
    return {label: ir for label, ir in sample_schedules(g, n + 1, seed=seed, num_sms=num_sms) if label != "default"}


def ir_of(target: str, num_sms: int, edits: str, sampled: tuple = ()):
    """The schedule an edit text from the default names, or the sampled one `SAMPLED + label` names
    (sampled = (n, seed) of the run)."""
    _, base = target_ir(target, num_sms)
    if edits.startswith(SAMPLED):
        return sampled_irs(target, num_sms, *sampled)[edits[len(SAMPLED):]]
    return apply_edits(base, edits) if edits else base


def search_job(job: dict) -> dict:
    """One climb (in a pool worker): job has target, num_sms, device, start ('default' | 'expert'),
    seconds, seed. Returns the job with the climb's best edits from `start` and its snapshots."""
    _, base = target_ir(job["target"], job["num_sms"])
    start = expert_of(base) if job["start"] == "expert" else base
    _, path, counts = climb(start, job["device"], job["seconds"], random.Random(job["seed"]),
                            snapshots=SNAPSHOTS if job["start"] == "default" else ())
    return dict(job, path=path, counts=counts)


def compile_job(job: tuple) -> float:
    """Compile one schedule's megakernel into NVRTC's on-disk cache (in a pool worker, no GPU)."""
    target, num_sms, edits, arch, sampled = job
    from megakernel_gym.compiler.codegen import emit_cuda
    from megakernel_gym.cuda.nvrtc import CudaCompileError, compile_cuda
    t0 = time.perf_counter()
    try:
        compile_cuda(emit_cuda(ir_of(target, num_sms, edits, sampled).plan())[0], "megakernel.cu", (),
                     arch, host_includes=False)
    except CudaCompileError:
        pass     # the measuring process compiles it again and records the error
    return time.perf_counter() - t0


def search(targets, num_sms: int, device: str, budget_s: float, restarts: int, from_default: int, seed: int,
           pool) -> dict[str, list[dict]]:
    """Every climb of every target, run in `pool`: target -> the finished jobs."""
    rng = random.Random(seed)
    climbs = restarts + from_default
    jobs = [{"target": t, "num_sms": num_sms, "device": device, "start": "expert" if i < restarts else "default",
             "seconds": budget_s / climbs, "seed": rng.randrange(2**31), "climb": i}
            for t in targets for i in range(climbs)]
    done = {t: [] for t in targets}
    for r in pool.map(search_job, jobs, chunksize=1):
        done[r["target"]].append(r)
        c = r["counts"]
        log(f"{r['target']} climb {r['climb']} from {r['start']}: {c['tried']} edits tried, {c['refused']} refused, "
            f"{c['kept']} kept, predicted {c['predicted_us']:.1f} us")
    return done


_CLIMB_LABEL = re.compile(r"climb (\d+) from (\w+)(?: after (\d+)%)?$")


def climbs_of_run(doc: dict, name: str) -> dict:
    """A sim_adversary.json's climbs as --save-search writes them, from its rows (each climb's best and
    its snapshots, by label: schedules_of names them so), so that a later run measures the same schedules."""
    climbs: dict[str, dict[int, dict]] = {}
    for r in doc["rows"]:
        m = _CLIMB_LABEL.match(r["label"])
        if not m:
            continue
        k = int(m.group(1))
        c = climbs.setdefault(r["target"], {}).setdefault(
            k, {"target": r["target"], "climb": k, "start": m.group(2), "path": [], "counts": {"snapshots": []}})
        if m.group(3):
            c["counts"]["snapshots"].append([int(m.group(3)) / 100, r["edits_from_start"], None])
        else:
            c["path"] = r["edits_from_start"]
    return {"climbs": {t: [cs[k] for k in sorted(cs)] for t, cs in climbs.items()},
            "note": f"the schedules of {name} ({doc['date']}; its search: {doc.get('search')}) measured again",
            "num_sms": doc["num_sms"], "device": doc["sim_device"]}


def schedules_of(target: str, num_sms: int, climbs: list[dict], device: str, sampled: tuple = ()) -> list[tuple]:
    """(label, edit text from the default IR, IR, the start it was searched from, the edits from there): the
    default, the expert, the known moves on the expert, the sampled schedules where sampled = (n, seed) asks
    for them (their text SAMPLED + label), then each climb's best and snapshots (distinct schedules; the
    searched sorted by prediction)."""
    _, base = target_ir(target, num_sms)
    e_text = expert_edits(base)
    expert = apply_edits(base, e_text)
    out, seen = [("default", "", base, "", []), ("expert", e_text, expert, "", [])], {base.text, expert.text}
    for label, text in known_moves(expert).items():
        try:
            ir = apply_edits(expert, text)
        except (EditError, IRError) as e:
            log(f"{target} {label}: refused now ({str(e)[:160]})")
            continue
        if ir.text not in seen:
            seen.add(ir.text)
            out.append((f"known: {label}", e_text + "\n" + text, ir, "expert", text.splitlines()))
    for label, ir in (sampled_irs(target, num_sms, *sampled).items() if sampled and sampled[0] else ()):
        text = render(ir)               # (the compiler's IR: no .text of its own)
        if text not in seen:
            seen.add(text)
            out.append((SAMPLED + label, SAMPLED + label, ir, "sampled", []))
    found = []
    for c in climbs:
        start_text, start = (e_text, expert) if c["start"] == "expert" else ("", base)
        picks = [(f"climb {c['climb']} from {c['start']}", c["path"])]
        picks += [(f"climb {c['climb']} from default after {f:.0%}", p) for f, p, _ in c["counts"]["snapshots"] if p]
        for label, path in picks:
            if not path:
                continue
            try:
                ir = apply_edits(start, "\n".join(path))
            except (EditError, IRError) as e:   # a chain is replayed as one script: say so if it differs
                log(f"{target} {label}: its edits as one script are refused ({str(e)[:120]})")
                continue
            if ir.text not in seen:
                seen.add(ir.text)
                found.append((label, "\n".join(([start_text] if start_text else []) + path), ir, c["start"], path))
    found.sort(key=lambda x: predict(x[2].plan(), device).latency_us)
    return out + found


# Where a measured step attends: "mid", every sequence at pos = max_seq // 2, so pos + 1 is the mean
# of the judge's uniform draw (the sim's expectation, costmodel.attended_positions); "seed", seed 0's
# draw, what runs before 2026-11-29 timed (527 of SmolLM2's 2,048: a quarter of its cache). A file
# names its own (`positions`; none: "seed"), and its rows are predicted at them.
POSITIONS = ("mid", "seed")


def target_config(target: str):
    """The decode step's config (batch, vocab, max_seq) of a zoo model or a level-5 problem."""
    if target in ZOO:
        return ZOO[target].args[0]
    from families_gpu import problem_ir
    return problem_ir(target, 1)[1]


def step_positions(target: str, how: str) -> list[int]:
    """The step's pos per sequence that `how` (POSITIONS) names for `target`."""
    from megakernel_gym.compiler.zoo import step_inputs
    cfg = target_config(target)
    if how == "mid":
        return [cfg.max_seq // 2] * cfg.batch
    if how == "seed":
        return step_inputs(cfg, 0)[1].tolist()
    raise ValueError(f"positions {how!r}: one of {', '.join(POSITIONS)}")


def load_step(target: str, pos: str = "mid"):
    """The target's weights and inputs on the GPU (seed 0; the positions `pos` names, step_positions),
    the eager bf16 output and the float32 truth: (graph, params, feeds, truth, eager error, model)."""
    import copy
    import torch
    from megakernel_edits import rel_err
    from megakernel_gym.compiler import module_tensors
    g, _ = target_ir(target, torch.cuda.get_device_properties(0).multi_processor_count)
    if target in ZOO:
        model, inputs = ZOO[target](device="cuda")
    else:
        from families_gpu import problem_ir
        from megakernel_gym.compiler.zoo import make_block
        mod, cfg, _, _ = problem_ir(target, 1)
        model, inputs = make_block(mod.block, cfg, seed=0, device="cuda")
    at = g.inputs.index(positions_input(g))
    inputs = tuple(torch.tensor(step_positions(target, pos), dtype=x.dtype, device=x.device) if i == at else x
                   for i, x in enumerate(inputs))
    with torch.no_grad():
        ref = model(*inputs)
        truth = copy.deepcopy(model).float()(*[x.float() if x.is_floating_point() else x for x in inputs])
    return g, module_tensors(model), dict(zip(g.inputs, inputs)), truth, rel_err(ref, truth), model


def measure_target(target: str, schedules, device: str, iters: int, rounds: int, positions: str = "mid") -> list[dict]:
    """Each schedule compiled, run once (checked against the float32 truth) and timed in `rounds` rounds
    that alternate between the schedules (median of the rounds' medians, lowest p10, highest p90), at
    the positions `positions` names (step_positions), where the sim predicts it."""
    import torch
    from megakernel_edits import rel_err
    from megakernel_gym.compiler.runtime import Megakernel, time_us
    from megakernel_schedules import context_alive
    g, params, feeds, truth, eager_err, _ = load_step(target, positions)
    at = fed_positions(g, feeds)
    rows, launches = [], {}
    for label, text, ir, start, path in schedules:
        plan = ir.plan()
        row = {"target": target, "label": label,
               "edits": 0 if text.startswith(SAMPLED) else text.count("\n") + 1 if text else 0,
               "start": start, "edits_from_start": path, "tasks": len(plan.tg.tasks), "pos": at,
               "predicted_us": round(predict(plan, device, positions=at).latency_us, 2),
               "predicted_per_op_pools_us": round(_per_op_pools(plan, device), 2)}
        try:
            t0 = time.perf_counter()
            launch = Megakernel(plan).bind(params, feeds)
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            launch()
            launch.check()
            out = launch.outputs()[g.outputs[0]].float()
            row["rel_l2_err_vs_fp32"] = rel_err(out, truth)
            row["correct"] = row["rel_l2_err_vs_fp32"] <= max(1.5 * eager_err, 1e-3) and bool(torch.isfinite(out).all())
            launches[label] = launch
        except Exception as e:  # noqa: BLE001 - a schedule that fails is a result
            row["error"] = f"{type(e).__name__}: {e}"[:500]
            row["correct"] = False
            if not context_alive():
                rows.append(row)
                log(f"{target}: the CUDA context is gone after {label}; the rest of this target is not measured")
                break
        rows.append(row)
    times = {k: [] for k in launches}
    for _ in range(rounds):
        for k, launch in launches.items():
            times[k].append(time_us(launch, iters))
    for row in rows:
        ts = times.get(row["label"])
        if ts:
            row["measured"] = {"median_us": round(statistics.median(t["median_us"] for t in ts), 2),
                               "p10_us": round(min(t["p10_us"] for t in ts), 2),
                               "p90_us": round(max(t["p90_us"] for t in ts), 2), "rounds": rounds}
        log(f"{target:22s} {row['label'][:34]:34s} predicted {row['predicted_us']:8.1f} us"
            + (f"  measured {row['measured']['median_us']:8.1f} us  correct {row['correct']}" if ts else
               f"  {row.get('error', '')[:100]}"))
    launches.clear()
    torch.cuda.empty_cache()
    return rows


def score(rows: list[dict], where: str) -> list[dict]:
    """The targets over `rows` (one target's or all): rows[0] and rows[1] of each target are its default
    and expert; speedups are over that target's expert. Sampled schedules (--sampled: data for a refit)
    get their speedups but stay out of the targets, which are over what the adversary found."""
    experts = {r["target"]: r for r in rows if r["label"] == "expert"}
    for r in rows:
        e = experts[r["target"]]
        r["sim_speedup_vs_expert"] = round(e["predicted_us"] / r["predicted_us"], 4)
        m, em = r.get("measured", {}).get("median_us"), e.get("measured", {}).get("median_us")
        if m and em:
            r["gpu_speedup_vs_expert"] = round(em / m, 4)
            r["sim_over_gpu"] = round(r["sim_speedup_vs_expert"] / r["gpu_speedup_vs_expert"], 4)
    searched = [r for r in rows if r["label"] not in ("default", "expert") and r.get("start") != "sampled"]
    timed = [r for r in rows if r.get("measured") and r.get("start") != "sampled"]
    worst = max((abs(r["sim_over_gpu"] - 1) for r in searched if "sim_over_gpu" in r), default=None)
    by_target = {}
    for r in timed:
        by_target.setdefault(r["target"], []).append(r)
    # Spearman within each target (latencies of different models are not one scale), then the smallest; over
    # the distinct points: schedules the sim predicts within DISTINCT of one another are near-ties whose
    # measured order is timing noise (the speedup target above holds them to 5% each)
    rho_all = {t: round(spearman([r["predicted_us"] for r in rs], [r["measured"]["median_us"] for r in rs]), 4)
               for t, rs in by_target.items() if len(rs) >= 3}
    rhos, kept = {}, {}
    for t, rs in by_target.items():
        pts = []
        for r in rs:     # the default and the expert first (rows' order), then the rest in order
            if all(abs(r["predicted_us"] / p["predicted_us"] - 1) >= DISTINCT for p in pts):
                pts.append(r)
        kept[t] = len(pts)
        if len(pts) >= 3:
            rhos[t] = round(spearman([r["predicted_us"] for r in pts], [r["measured"]["median_us"] for r in pts]), 4)
    return [
        {"target": f"{where}: every searched schedule's sim speedup over the expert within {SPEEDUP_TOLERANCE:.0%} "
                   "of the GPU's", "measured": None if worst is None else round(worst, 4),
         "schedules": len(searched), "met": worst is not None and worst <= SPEEDUP_TOLERANCE},
        {"target": f"{where}: Spearman(predicted, measured) >= {SPEARMAN_TARGET} over the default, the expert and the "
                   "searched (within each target, over schedules the sim predicts at least 1% apart; the smallest)", "measured": min(rhos.values(), default=None),
         "per_target": rhos, "distinct_points": kept, "within": f"{DISTINCT:.0%}",
         "all_points_per_target": rho_all, "schedules": len(timed),
         "met": bool(rhos) and min(rhos.values()) >= SPEARMAN_TARGET},
        {"target": f"{where}: every schedule runs correct on the GPU (as close to the float32 truth as eager bf16)",
         "measured": f"{sum(bool(r.get('correct')) for r in rows)}/{len(rows)}",
         "met": all(r.get("correct") for r in rows)},
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", nargs="*", default=list(TARGETS), help="zoo models or level-5 problems")
    ap.add_argument("--budget-s", type=float, default=120.0, help="seconds of search per target, all climbs")
    ap.add_argument("--restarts", type=int, default=4, help="climbs from the expert")
    ap.add_argument("--from-default", type=int, default=3, help="climbs from the default schedule")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampled", type=int, default=0,
                    help="also measure this many of calibrate.sample_schedules' schedules per target (data for a refit)")
    ap.add_argument("--iters", type=int, default=20, help="timed runs per schedule and round (at least)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds alternating between the schedules")
    ap.add_argument("--workers", type=int, default=0, help="search and compile processes (default: cores - 1)")
    ap.add_argument("--device-name", default=None, choices=sorted(DEVICES),
                    help="the constants the sim searches with (default: from the GPU's name; H100 on a CPU)")
    ap.add_argument("--search-only", action="store_true", help="no GPU: search and predict only")
    ap.add_argument("--save-search", default=None, help="write the climbs (JSON) here")
    ap.add_argument("--searched", default=None,
                    help="the climbs of an earlier --save-search, or of a sim_adversary.json (its schedules measured "
                         "again, say after a codegen change), instead of a search; --targets picks among them "
                         "where given")
    ap.add_argument("--merge", nargs="+", default=None,
                    help="sim_adversary.json files of GPU runs over different targets: scored again as one file")
    ap.add_argument("--rescore", default=None, metavar="RUN.json",
                    help="CPU: predict a GPU run's schedules again with the cost model as it is now and score them "
                         "(the search stays the one made against the model of the run; the file says so)")
    ap.add_argument("--refit", default=None,
                    help="a GPU run's sim_adversary.json: fit the device constants to its measured rows (CPU)")
    ap.add_argument("--fields", default=None,
                    help="with --refit: the constants to fit, comma-separated (default: all of calibrate.FIT_FIELDS)")
    ap.add_argument("--positions", default="mid", choices=POSITIONS,
                    help="where the timed step attends: mid (pos = max_seq // 2, the judge's mean) or seed "
                         "(seed 0's draw)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    t_start = time.perf_counter()
    if a.refit:
        return refit(Path(a.refit), Path(a.out), a.workers, tuple(a.fields.split(",")) if a.fields else None)
    if a.rescore:
        return rescore(Path(a.rescore), Path(a.out), a.workers)
    if a.merge:
        return merge([Path(f) for f in a.merge], Path(a.out))
    import torch
    gpu = torch.cuda.is_available() and not a.search_only
    if not gpu and not a.search_only:
        raise SystemExit("no CUDA GPU here: run on the device, or pass --search-only")
    device = a.device_name or next((k for k in DEVICES if gpu and k in torch.cuda.get_device_name(0)), "H100")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if gpu else 132
    workers = a.workers or max(1, (os.cpu_count() or 2) - 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        if a.searched:
            saved = json.loads(Path(a.searched).read_text())
            if "rows" in saved:   # a GPU run's file: its climbs again, from its rows
                saved = climbs_of_run(saved, a.searched)
            climbs, search_note = saved["climbs"], saved["note"]
            if "--targets" in sys.argv:
                climbs = {t: c for t, c in climbs.items() if t in a.targets}
            if saved["num_sms"] != num_sms or saved["device"] != device:
                search_note += (f"; searched on {saved['num_sms']} SMs with {saved['device']} constants, measured on "
                                f"{num_sms} SMs and predicted with {device}'s")
        else:
            log(f"{a.targets} on {num_sms} SMs, sim constants {device}; search {a.budget_s:.0f} s per target in "
                f"{a.restarts} climbs from the expert and {a.from_default} from the default, {workers} processes")
            climbs = search(a.targets, num_sms, device, a.budget_s, a.restarts, a.from_default, a.seed, pool)
            search_note = (f"search {a.budget_s:.0f} s of sim per target in {a.restarts} climbs from the expert and "
                           f"{a.from_default} from the default, seed {a.seed}")
            if a.save_search:
                Path(a.save_search).write_text(json.dumps({"climbs": climbs, "note": search_note, "num_sms": num_sms,
                                                           "device": device}, indent=0))
        sampled = (a.sampled, a.seed)
        per_target = {t: schedules_of(t, num_sms, climbs[t], device, sampled) for t in climbs}
        if gpu:
            from megakernel_gym.cuda.nvrtc import _default_arch
            jobs = [(t, num_sms, s[1], _default_arch(), sampled) for t, ss in per_target.items() for s in ss]
            t0 = time.perf_counter()
            list(pool.map(compile_job, jobs, chunksize=1))
            log(f"compiled {len(jobs)} megakernels in {time.perf_counter() - t0:.0f} s")
    doc = {"targets_searched": list(per_target), "num_sms": num_sms, "sim_device": device, "search": search_note,
           "sampled": {"n": a.sampled, "seed": a.seed}, "positions": a.positions,
           "climbs": {t: [{k: v for k, v in c.items() if k != "path"} | {"edits": len(c["path"])} for c in cs]
                      for t, cs in climbs.items()}}
    rows = []
    for t, ss in per_target.items():
        if gpu:
            t0 = time.perf_counter()
            rows += measure_target(t, ss, device, a.iters, a.rounds, a.positions)
            log(f"{t}: {len(ss)} schedules measured in {time.perf_counter() - t0:.0f} s")
            # written after every target: a run cut short by a time limit keeps what it measured
            save(rows, per_target, device, search_note, doc, Path(a.out), t_start, final=False)
        else:
            rows += [{"target": t, "label": label, "predicted_us": round(predict(ir.plan(), device).latency_us, 2),
                      "predicted_per_op_pools_us": round(_per_op_pools(ir.plan(), device), 2), "start": start,
                      "edits_from_start": path} for label, _, ir, start, path in ss]
    if gpu:
        save(rows, per_target, device, search_note, doc, Path(a.out), t_start, final=True)
    else:
        print(json.dumps(dict(doc, rows=rows, wall_s=round(time.perf_counter() - t_start, 1)), indent=1))


def score_all(rows: list[dict], suffix: str = "", log_them: bool = True) -> list[dict]:
    """score() over all of `rows`, then over each target's where there are several (each where-label with
    `suffix`), logged; the speedups a scoring before left on the rows are dropped first."""
    for r in rows:
        for k in ("sim_speedup_vs_expert", "gpu_speedup_vs_expert", "sim_over_gpu"):
            r.pop(k, None)
    measured = list(dict.fromkeys(r["target"] for r in rows))
    targets = score(rows, "all targets" + suffix)
    if len(measured) > 1:
        for t in measured:
            targets += score([r for r in rows if r["target"] == t], t + suffix)
    if log_them:
        for t in targets:
            log(f"{'met ' if t['met'] else 'MISS'} {t['target']}: {t['measured']}")
    return targets


def save(rows: list[dict], per_target: dict, device: str, search_note: str, doc: dict, out_dir: Path, t_start: float,
         final: bool) -> None:
    """Score the rows (over all targets measured so far, then per target) and write sim_adversary.json."""
    from judge_bench import write
    measured = list(dict.fromkeys(r["target"] for r in rows))
    targets = score_all(rows, log_them=final)
    left = [t for t in per_target if t not in measured]
    note = (f"{', '.join(measured)}; sim constants {device}; {search_note}"
            + (f"; PARTIAL: not measured yet: {', '.join(left)}" if left else ""))
    write("adversary", rows, targets, out_dir, prefix="sim_", quiet=True, notes=note,
          extra=dict(doc, wall_s=round(time.perf_counter() - t_start, 1)))


def row_ir(row: dict, num_sms: int, sampled: tuple, as_of: str | None = None):
    """The schedule a measured row names: the default, the expert, a sampled one by label, or its
    start (the default or the expert) with its edits from there; the expert as it was on `as_of`,
    the day the row was timed (None: as it is now)."""
    _, base = target_ir(row["target"], num_sms)
    if row["label"] == "default":
        return base
    if row["label"] == "expert":
        return expert_of(base, as_of)
    if row.get("start") == "sampled":
        return ir_of(row["target"], num_sms, row["label"], sampled)
    start = expert_of(base, as_of) if row["start"] == "expert" else base
    return apply_edits(start, "\n".join(row["edits_from_start"]))


def _plan_job(job: tuple):
    """(plan, its costs at the positions the row was timed at: costmodel.costs_at) of a measured row's
    schedule (in a pool worker)."""
    row, num_sms, sampled, positions, as_of = job
    plan = row_ir(row, num_sms, sampled, as_of).plan()
    return plan, costs_at(plan, step_positions(row["target"], positions))


def rebuilt_plans(doc: dict, rows: list[dict], workers: int) -> list[tuple]:
    """(plan, costs) of each of a run's `rows`, rebuilt in a pool of `workers` processes."""
    sampled = (doc["sampled"]["n"], doc["sampled"]["seed"]) if doc.get("sampled") else ()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers or os.cpu_count() or 2, mp_context=get_context("spawn")) as pool:
        plans = list(pool.map(_plan_job, [(r, doc["num_sms"], sampled, doc.get("positions", "seed"), doc.get("date", ""))
                                          for r in rows], chunksize=1))   # the expert as the run timed it
    log(f"{len(plans)} plans rebuilt in {time.perf_counter() - t0:.0f} s")
    return plans


def refit(path: Path, out_dir: Path, workers: int, fields: tuple[str, ...] | None = None) -> None:
    """Fit the sim's constants (calibrate.fit_device, from the constants the run predicted with; `fields`:
    which of them, default all FIT_FIELDS) to every measured row of a GPU run, all families at once; then leave each family out in turn (fit
    on the others, score it), and score the adversary's targets under the fitted constants (in
    sample: the searched were found against the old constants). Writes sim_adversary_refit.json."""
    from megakernel_gym.compiler.calibrate import FIT_FIELDS, agreement, fit_device, spec_literal
    fields = tuple(fields or FIT_FIELDS)
    bad = sorted(set(fields) - set(FIT_FIELDS))
    if bad:
        raise SystemExit(f"--fields: {bad} are not fitted constants; choose from {', '.join(FIT_FIELDS)}")
    out_dir.mkdir(parents=True, exist_ok=True)      # before minutes of fitting, not after
    doc = json.loads(path.read_text())
    rows = [r for r in doc["rows"] if r.get("measured") and r.get("correct")]
    base = DEVICES[doc["sim_device"]]
    plans = rebuilt_plans(doc, rows, workers)
    for r, (plan, costs) in zip(rows, plans):     # the rebuild is the schedule the run measured
        p = predict(plan, base, costs=costs).latency_us
        if abs(p / r["predicted_us"] - 1) > 0.005:
            raise SystemExit(f"{r['target']} {r['label']}: rebuilt plan predicts {p:.1f} us, the run {r['predicted_us']}")
    meas = [r["measured"]["median_us"] for r in rows]
    families = list(dict.fromkeys(r["target"] for r in rows))
    t0 = time.perf_counter()
    fitted, report = fit_device(plans, meas, base, name=base.name, fields=fields)
    log(f"joint fit in {time.perf_counter() - t0:.0f} s: {spec_literal(fitted)}")
    after = report["predicted_after_us"]
    per_family = {}
    for f in families:
        idx = [i for i, r in enumerate(rows) if r["target"] == f]
        per_family[f] = {"before": agreement([rows[i]["predicted_us"] for i in idx], [meas[i] for i in idx]),
                         "after": agreement([after[i] for i in idx], [meas[i] for i in idx])}
    held_out = {}
    for f in families:
        tr = [i for i, r in enumerate(rows) if r["target"] != f]
        te = [i for i, r in enumerate(rows) if r["target"] == f]
        dev, _ = fit_device([plans[i] for i in tr], [meas[i] for i in tr], base, name=base.name, fields=fields)
        pred = [predict(plans[i][0], dev, costs=plans[i][1]).latency_us for i in te]
        held_out[f] = dict(agreement(pred, [meas[i] for i in te]), constants=spec_literal(dev))
        log(f"{f} held out: {held_out[f]['spearman']:.3f} Spearman, median error {held_out[f]['median_abs_pct_err']:.1f}%")
    targets = score_all([dict(r, predicted_us=round(after[i], 2)) for i, r in enumerate(rows)],
                        " (refitted constants, in sample)")
    out = {"name": "sim_adversary_refit", "device": doc["device"], "date": doc["date"],
           "command": "python " + " ".join(sys.argv), "refit_of": {"file": str(path), "command": doc["command"]},
           "rows": [{"target": r["target"], "label": r["label"], "measured_us": m, "predicted_before_us": r["predicted_us"],
                     "predicted_after_us": round(p, 2)} for r, m, p in zip(rows, meas, after)],
           "fields": list(fields), "fitted": spec_literal(fitted), "report": {k: v for k, v in report.items()
                                                      if k not in ("predicted_before_us", "predicted_after_us")},
           "per_family": per_family, "held_out_family": held_out, "targets": targets}
    (out_dir / "sim_adversary_refit.json").write_text(json.dumps(out, indent=1))


def rescore(path: Path, out_dir: Path, workers: int) -> None:
    """A GPU run's rows predicted again by the cost model as it is now (each row keeps the prediction its
    run made as predicted_at_search_us) and scored again; the measurements are the run's. What the
    adversary would find against today's model is not searched: the file's `rescored` says so."""
    import datetime
    doc = json.loads(path.read_text())
    rows = doc["rows"]
    for r, (plan, costs) in zip(rows, rebuilt_plans(doc, rows, workers)):
        r.setdefault("predicted_at_search_us", r["predicted_us"])
        r["predicted_us"] = round(predict(plan, doc["sim_device"], costs=costs).latency_us, 2)
    doc["targets"] = score_all(rows)
    doc["rescored"] = {"command": "python " + " ".join(sys.argv),
                       "date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "note": "predicted_us from the cost model at this date on the CPU; measured and the search "
                               "(against the model of the run: predicted_at_search_us) are the GPU run's"}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sim_adversary.json").write_text(json.dumps(doc, indent=1))


def merge(paths: list[Path], out_dir: Path) -> None:
    """One sim_adversary.json from GPU runs that each measured some targets (a run's device time is
    capped): rows concatenated (a target measured twice keeps its last run), targets scored again
    over all of them, each run's command and date kept."""
    docs = [json.loads(p.read_text()) for p in paths]
    kinds = {(d["device"], d.get("sim_device"), d.get("positions", "seed")) for d in docs}
    if len(kinds) > 1:
        raise SystemExit(f"runs on different GPUs, sim constants or positions cannot be one file: "
                         f"{sorted(map(str, kinds))}")
    by_target: dict[str, list[dict]] = {}
    for d in docs:
        for t in dict.fromkeys(r["target"] for r in d["rows"]):
            by_target[t] = [r for r in d["rows"] if r["target"] == t]
    rows = [r for rs in by_target.values() for r in rs]
    targets = score_all(rows)
    out = {"name": "sim_adversary", "device": docs[0]["device"], "date": max(d["date"] for d in docs),
           "command": "; ".join(f"run {i}: {d['command']}" for i, d in enumerate(docs, 1))
                      + "; merged: python " + " ".join(sys.argv),
           "rows": rows, "targets": targets,
           "notes": " | ".join(f"run {i} ({d['date']}): {d.get('notes', '')}" for i, d in enumerate(docs, 1)),
           "targets_searched": list(by_target), "num_sms": docs[0]["num_sms"], "sim_device": docs[0]["sim_device"],
           "search": docs[0].get("search"), "sampled": docs[0].get("sampled"),
           "positions": docs[0].get("positions", "seed"),
           "climbs": {t: c for d in docs for t, c in d.get("climbs", {}).items()}}
    rescored = {f"run {i}": d["rescored"] for i, d in enumerate(docs, 1) if d.get("rescored")}
    if rescored:     # whose rows were predicted again after their run (--rescore), and when
        out["rescored"] = rescored
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sim_adversary.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
