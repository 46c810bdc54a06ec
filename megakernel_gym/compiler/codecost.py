"""What a task pays for code and for a light op beside its bytes (issue 39): each device function's first
calls in the step, by the size of its source (cold_code, cold_code_chars), and the small ops' and row
norms' own time (light_tasks, light_task_us). Taken out of costmodel.py, which prices them in predict.
"""
from __future__ import annotations

import numpy as np

from megakernel_gym.compiler.codegen import function_table
from megakernel_gym.compiler.devices import DeviceSpec
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.simloop import csr
from megakernel_gym.compiler.tasks import task_boxes
from megakernel_gym.compiler.trips import NORM_KINDS, _onchip_array, _op_index


# The kernel's code is one function whose task bodies are device functions, one per body that
# reads alike (codegen: the same projection in every layer shares one), so the step's code is a few
# of them, each run layer after layer. The first op in the step to call a function waits for its
# code to come from memory on every SM that runs it, at once, so once on the step's path; later
# calls find it on chip. An edit that gives some layers a body of their own (a fusion or an `ahead`
# cap on one layer's op; not a tile size, the body's bounds) adds functions that each pay it, and
# the layer after them pays for the shared functions it now calls first. On an H200 (ab_knobs_distinct.json: codegen's
# distinct_ops probe, the same schedule, waits and bits) Qwen3-0.6B's expert ran 775.6 us, and
# +27.9 / +64.8 / +131.0 us with layer 0 / 0-1 / 0-3 in functions of their own (sm_90 .text 142 ->
# 270 / 397 / 648 KB), where the sim had said +0. cold_code_us 5.5 a call says +32.2 / +64.5 /
# +128.9, and takes the adversary's worst searched speedup error from 14.2% to 9.9% (the rows of
# sim_adversary.json as they were). Out of sample, the same probe with layer 0 / 0-3 of their own
# (ab_knobs_distinct_llama.json, ab_knobs_distinct_gpt2.json): llama-1b's expert +4.0% / +20.1%
# measured, +3.2% / +13.1% predicted; GPT-2 large's +1.4% / +8.4%, +3.1% / +12.6%. One op of
# Qwen3's layer 0 at a time (ab_knobs_distinct_ops.json): its attention / adds / q, k and v / mlp
# +7.6 / +5.7 / +8.6 / +5.8 us measured, +5.5 / +10.2 / +5.5 / +5.5 predicted; but the attention of
# layers 0-3 +86.3 against +22.0: more distinct code costs more than its first calls (llama-1b's
# layers 0-3 say so too), which this does not price yet. Two other forms
# fit the probe and scored worse on the adversary's rows: a cost by
# the function's size (1 us per 1,000 characters of its source, which the sm_90 code grows with at
# 2.3-5.2 bytes a character): 12.5%, the defaults 2-4% better; and every SM's first call of a
# function (its own instruction cache), which made the defaults, whose layers share more functions
# than the experts', 5-11% slower than measured at 1 us a call.
# Since session 48 a first call costs by its size, cold_code_us 0.2 plus cold_code_kchar_us 0.8 per 1,000
# characters of the function's source (a residual add ~0.5k, a rope ~0.75k, a projection ~2.5k, an attention
# with its fused producers 5-11k), together with the light ops' own time below. The flat 5.5 us had read
# llama-1b's default layer 0 53 us longer than its steady layers where an H200 ran it 9 us longer (GPT-2
# large's 37 against 1.5; task_probe_dump0_*.json: the small ops' first calls ran as fast as their later
# ones, the projections' and attention's 1.2-3 us slower), standing in for the time the default's norm and
# small-op tasks take in every layer; and a single attention block, all first calls, read 85 us where it
# ran 65, so fusing a light op away read as a 6 us gain the GPU never paid back (the lm policy's schedule
# 1.17x read, 0.91x run). Scored with bench/sim_score.py (docs/compiler.md has the grid).
def _calls_key(plan: Plan, distinct_ops: str) -> tuple:
    """_first_calls' cache key on the task graph: the plan's split and `ahead` knobs (the only parts besides the
    task graph a body's text reads) and the distinct_ops probe."""
    knobs = plan.knobs
    return tuple(tuple(sorted(((getattr(knobs, k, None) or {}) if knobs else {}).items()))
                 for k in ("splits", "ahead")) + (distinct_ops,)


def _first_calls(plan: Plan, distinct_ops: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(task, function id) of every first call in the step (see cold_code), and each function's
    source characters (codegen.function_table). The calls are kept on the task graph per split and
    `ahead` knobs, the plan's only parts besides the task graph that a body's text reads."""
    tg = plan.tg
    key = _calls_key(plan, distinct_ops)
    cache = tg.__dict__.setdefault("_function_calls", {})
    if len(cache.get(key, ())) != 4:     # (a plan pickled before the callers were kept has three)
        calls, sizes = function_table(plan, distinct_ops)
        names, _ = _op_index(tg)
        per_op = [calls.get(op, ()) for op in names]
        nf = max(sizes, default=-1) + 1
        callers = np.zeros(nf, dtype=np.int64)       # how many ops call each function (shared_calls)
        for c in per_op:
            for f in set(c):
                if f < nf:
                    callers[f] += 1
        cache[key] = (np.array([len(c) for c in per_op], dtype=np.int64),
                      np.array([f for c in per_op for f in c], dtype=np.int64),
                      np.array([sizes.get(i, 0) for i in range(nf)], dtype=float), callers)
    ncalls, fids, chars, _ = cache[key]
    _, idx = _op_index(tg)
    ptr, flat = csr(plan.queues)
    if not len(flat) or not len(fids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), chars
    nf = int(fids.max()) + 1
    op_at = idx[flat]
    counts = ncalls[op_at]
    pos = np.repeat(np.arange(len(flat)), counts)                   # each call's queue position
    starts = (np.cumsum(ncalls) - ncalls)[op_at]
    within = np.arange(len(pos)) - np.repeat(np.cumsum(counts) - counts, counts)
    fid = fids[np.repeat(starts, counts) + within]
    queue = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))[pos]
    _, first = np.unique(queue * nf + fid, return_index=True)      # each SM's first call of each function
    opi, f1 = op_at[pos[first]], fid[first]
    first_op = np.full(nf, np.iinfo(np.int64).max)
    np.minimum.at(first_op, f1, opi)                                # the first op (graph order) to call it
    keep = opi == first_op[f1]
    return flat[pos[first]][keep], f1[keep], chars


def cold_code(plan: Plan, distinct_ops: str = "") -> np.ndarray:
    """Per task, how many of the device functions its calls run (codegen.function_calls) it is among
    the first to call in the step: a first call on its SM, in the first op in the graph's order that
    calls the function (see above). `distinct_ops`: emit_cuda's probe of that name (the ops it
    matches in functions of their own), so the probe's builds are priced too."""
    tasks, _, _ = _first_calls(plan, distinct_ops)
    return np.bincount(tasks, minlength=len(plan.tg.tasks)).astype(float)


def cold_code_chars(plan: Plan, distinct_ops: str = "") -> np.ndarray:
    """Per task, the source characters (codegen.function_table) of the functions it is among the
    first to call (cold_code): what its first calls fetch, by the size of their code."""
    tasks, fids, chars = _first_calls(plan, distinct_ops)
    return np.bincount(tasks, weights=chars[fids], minlength=len(plan.tg.tasks)).astype(float)


def shared_calls(plan: Plan, distinct_ops: str = "") -> np.ndarray:
    """Per device function (codegen.function_table's ids), how many ops call it: a layer's body that every
    layer shares is called by as many ops as there are layers, a body of one op's own (a fusion on one layer,
    the lm_head's) by one."""
    _first_calls(plan, distinct_ops)
    return plan.tg.__dict__["_function_calls"][_calls_key(plan, distinct_ops)][3]


def first_call_us(plan: Plan, dev: DeviceSpec, distinct_ops: str = "") -> np.ndarray | float:
    """Per task, what its first calls cost (see above): cold_code_us a call plus cold_code_kchar_us per
    1,000 characters of the functions (shared_code_kchar_us for one more than one op calls, where set), from
    one walk of the queues (predict's share of cold_code and cold_code_chars)."""
    shared = dev.cold_code_kchar_us if dev.shared_code_kchar_us is None else dev.shared_code_kchar_us
    if not (dev.cold_code_us or dev.cold_code_kchar_us or shared):
        return 0.0
    tasks, fids, chars = _first_calls(plan, distinct_ops)
    per_kchar = np.where(shared_calls(plan, distinct_ops)[fids] > 1, shared, dev.cold_code_kchar_us) if len(fids) else 0.0
    return np.bincount(tasks, weights=dev.cold_code_us + per_kchar / 1e3 * chars[fids],
                       minlength=len(plan.tg.tasks)).astype(float)


# The light ops' own time. Every family's default runs its small ops longer than their bytes say: in the
# task dumps of four families' defaults (layers 4-8 on an H200, docs/compiler.md) adds, activations,
# ropes and cache writes ran 0.3-1.9 us past their input, row norms 1.7-3.6 us more than the sim gave
# them, and in llama-1b's and GPT-2 large's layers 0-2 (task_probe_dump0_*.json) the default's steady
# layer ran 3.5-5.6 us longer than the sim's, mostly in its two norm tasks (one task reads the whole
# row and reduces it: 3.1-4.8 us busy, 1.07 us in the sim). A norm fused into its consumer is paid in
# every task that runs it (GPT-2 large's ln_2 in mlp.fc: each task's input phase 2.9 -> 5.0 us,
# task_probe_dump_gpt2_ln2.json), so a task pays norm_task_us for its own norm and for each norm in its
# prologue, small_task_us for its own small op. Scored with bench/sim_score.py on every row measured
# with the kernel as it is (the values: docs/compiler.md). Since session 50 the two norms are priced apart:
# a norm task stages its parameters while its SM waits for the input (from its last producer's signal
# to its own an H200 took 1.0-2.3 us, the sim 2.6-4.6 at norm_task_us 1.5), where a norm fused into a
# consumer's prologue starts only once the input is in, in every task of the consumer (GPT-2's ln_2 in
# mlp.fc: 2.1 us each): norm_task_us 1.0, fused_norm_us 2.0 (devices.py).
SMALL_KINDS = ("elementwise", "activation", "rope", "cache_write")


def _rows(tg, task) -> int:
    """The rows of a task's output box (every axis but the last)."""
    box, _ = task_boxes(tg, task)
    return int(np.prod([hi - lo for lo, hi in box[:-1]]))


def light_tasks(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per task, (1 where its own op is a small op of SMALL_KINDS, 1 where it is a row norm, how many
    distinct row norms its fused producers run, the rows its own norm normalizes past the first), kept
    on the task graph (they depend on the lowering alone)."""
    tg = plan.tg
    cached = tg.__dict__.get("_light_tasks")
    if cached is None:
        kind = {o.name: o.kind for o in tg.graph.ops}
        n = len(tg.tasks)
        own = np.fromiter((kind[t.op] in NORM_KINDS for t in tg.tasks), dtype=float, count=n)
        cached = tg.__dict__["_light_tasks"] = (
            np.fromiter((kind[t.op] in SMALL_KINDS for t in tg.tasks), dtype=float, count=n),
            own,
            np.fromiter((len({p for p, _ in t.prologue if kind[p] in NORM_KINDS}) for t in tg.tasks), dtype=float, count=n),
            np.fromiter((_rows(tg, t) - 1 if o else 0 for t, o in zip(tg.tasks, own)), dtype=float, count=n))
    return cached


def light_task_us(plan: Plan, dev: DeviceSpec) -> np.ndarray | float:
    """Per task, the light ops' own time it pays (see above): small_task_us for its own small op,
    norm_task_us for its own norm plus norm_row_us for each row of it past the first, and fused_norm_us
    (norm_task_us where it is None) for each fused norm it recomputes (not one it computes on chip, an
    `inline` norm, which onchip_norm_us prices)."""
    fused_us = dev.norm_task_us if dev.fused_norm_us is None else dev.fused_norm_us
    if not (dev.small_task_us or dev.norm_task_us or fused_us or dev.norm_row_us):
        return 0.0
    small, own, fused, more_rows = light_tasks(plan)
    return (dev.small_task_us * small + dev.norm_task_us * own + dev.norm_row_us * more_rows
            + fused_us * np.maximum(0.0, fused - _onchip_array(plan)))


__all__ = ["cold_code", "cold_code_chars", "first_call_us", "shared_calls", "light_tasks", "light_task_us", "SMALL_KINDS"]
