"""Round trips a task's body makes one after another, as the cost model counts them: element-wise
box loops, a norm's staged weights, a decode attention's and the step inputs' trips, and what an
epilogue or on-chip input saves (task_trips, input_stagings, task_staged). Taken out of costmodel.py
(issue 42).
"""
from __future__ import annotations

import math

import numpy as np

from megakernel_gym.compiler.codegen import (THREADS, _streams, attention_inputs, epilogue_ops, onchip_norm_problem)
from megakernel_gym.compiler.hops import LL_WORD_BYTES
from megakernel_gym.compiler.interpret import torch_dtype
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import per_task, task_boxes


def _op_index(tg) -> tuple[list[str], np.ndarray]:
    """(op names, each task's index into them), kept on the task graph."""
    cached = tg.__dict__.get("_op_index")
    if cached is None and tg.__dict__.get("_op_lowerings") is not None:
        lows = tg.__dict__["_op_lowerings"]
        idx = np.repeat(np.arange(len(lows), dtype=np.int64), [len(low.tasks) for _, low, _ in lows])
        cached = tg.__dict__["_op_index"] = ([op for op, _, _ in lows], idx)
    if cached is None:
        names: dict[str, int] = {}
        idx = np.fromiter((names.setdefault(t.op, len(names)) for t in tg.tasks), dtype=np.int64, count=len(tg.tasks))
        cached = tg.__dict__["_op_index"] = (list(names), idx)
    return cached


def _frozen_floats(values) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    a.flags.writeable = False
    return a


# memory round trips a task's body makes one after another, past its first (each waits for the
# one before): attention stages q, then scores its keys, then weighs its values; a split part
# also writes its partials and, the last of them, reads them all back; a cache write loads the
# new row before storing it; a fused producer run as a call of its own (not a matmul epilogue)
# stores its output and the next call reads it back. Each costs the memory latency. A decode
# attention's fused ropes and cache writes are staged together in its own body (the kernel's
# default, codegen step_inputs="body"): one trip for all of them.
TRIPS = {"decode_attention": 2, "cache_write": 1}
SPLIT_TRIPS = 2
STEP_INPUT_KINDS = ("rope", "cache_write")
# An element-wise body (codegen's _box_loop: elementwise ops, embeddings, ropes, cache writes) walks
# its box with each of the block's THREADS threads taking every THREADS-th element, and an element's
# load (a polled LL word, or a load the compiler may not move above the store before it) waits out
# one memory latency before the next element's: a thread makes ceil(elements / THREADS) trips one
# after another. A body over a tile of a few hundred elements makes one; GPT-2 large's GELU fused
# into its down projection (`fuse mlp.act into mlp.proj`) runs over the whole 5,120 x 2 input in
# every one of the projection's tasks, 40 trips, and an H200's probes timed that task's input phase
# 17.4 us longer than with the GELU a task of its own (3.52 -> 20.93 us, task_probe_gpt2_act_into_proj.json:
# 39 trips at 0.45 us), where the model without this term called the fusion a 3.6% gain and the
# step ran 27% slower.
BOX_KINDS = ("elementwise", "embedding", "rope", "cache_write")
# A norm's body (codegen's _rmsnorm, _layernorm) stages its weight (and a LayerNorm's bias) into shared
# memory, then each row of its box in turn: a trip for each, one after another. As a fused producer
# of a task it runs over every row the task reads: Qwen3's q_norm fused into its rope (the
# adversary's climb 5 from the default, 2026-11-28 evening run) normalises all 16 q heads in each rope
# task, which an H200 timed at 10.7 us where the rope took 1.2 alone (task_probe_qwen3_climb5.json);
# GPT-2 large's ln_2 fused into mlp.fc (two rows, weight and bias) added 2.7 us to each of the
# MLP's tasks (task_probe_gpt2_ln2_into_fc.json), where the sim charged one trip and saved a hop.
# The trips are serial with the task's compute too, not only with its loads: the compute warps take
# no row before the prologue has written the input vector, and an epilogue runs after the last row.
# That fused fc task's rows phase stayed at 5.1 us and its input phase grew 3.0 -> 5.7 us; with the
# trips under max(loads, compute), the ring-bound task (batch 2: its compute warps set the pace)
# hid them, and the sim called the fusion 7.1% faster than the expert where the GPU ran it 5.9% slower.
NORM_KINDS = ("rmsnorm", "layernorm")


def _per_task_kept(plan: Plan, name: str, fn) -> list[int]:
    """fn(tg, task, ops by name, _on_chip_readers) for every task (tasks.per_task), kept on the task
    graph under `name`."""
    tg = plan.tg
    cached = tg.__dict__.get("_task_" + name)
    if cached is None:
        ops = {o.name: o for o in tg.graph.ops}
        on_chip = _on_chip_readers(tg.graph, ops)
        cached = tg.__dict__["_task_" + name] = per_task(tg, name, lambda tg, tasks: [
            fn(tg, t, ops, on_chip) for t in tasks])
    return cached


# A matmul fused into another op's task runs in one call with it only as a real epilogue
# (codegen.epilogue_ops: the bias-free projections of Llama, Qwen3, SmolLM2); elsewhere (GPT-2's
# projections have a bias) it is a call of its own that stores its rows, and the task's body reads
# them back: two trips, one into the call and one back. On an H200 GPT-2 large's fused tasks spend
# 0.8-1.0 us from their last weight row to their signal where Qwen3's real epilogues spend 0.25-0.34
# (task_probe_dump_*_tasks.json), and its fc call stages x in 1.14 us where its k_proj, an op of its
# own, takes 0.75 (task_probe_gpt2_act_tiles_tasks.json; input_stagings prices the staging itself).
# Its expert with five fc+GELU tasks an SM (`tile transformer.h.*.mlp.act n=8`) ran 16.6% slower;
# the sim read 0.3% faster charging nothing, 5.1% slower with one trip a call, 15.3% with two and
# the staging. The other families' experts have no such calls (their matmuls fused into element-wise
# ops are real epilogues); a matmul fused into a rope or a cache write is one in any family.
def task_trips(plan: Plan) -> list[int]:
    """Per task, its dependent memory round trips past the first (TRIPS); kept on the task graph."""
    fused = dict(plan.knobs.fused) if plan.knobs else {}
    writer: dict = {}
    return _per_task_kept(plan, "trips", lambda tg, t, ops, on_chip: (
        TRIPS.get(ops[t.op].kind, 0) + (SPLIT_TRIPS if t.parts > 1 else 0)
        + _call_trips(tg, t, ops, on_chip, _absorbs(tg, t, ops, fused, writer), _epilogues(plan))))


def _epilogues(plan: Plan) -> frozenset[str]:
    """codegen.epilogue_ops, kept on the task graph (it reads the task graph alone: its fusions and
    tiles), so task_trips and onchip_norm_loads build the emitter for it once."""
    cached = plan.tg.__dict__.get("_epilogue_ops")
    if cached is None:
        cached = plan.tg.__dict__["_epilogue_ops"] = epilogue_ops(plan)
    return cached


def _absorbs(tg, t, ops: dict, fused: dict, writer: dict) -> bool:
    """Whether task t is a decode attention that stages its fused ropes and cache writes in its own
    body (codegen.attention_inputs: only where every producer fused into it is q's rope, a cache write
    or k's rope, with nothing fused into those). Where one is not (say a norm fused into k's rope),
    the kernel runs each producer as a call of its own, and each call is a trip. `writer`: filled on
    first use (each tensor's op)."""
    if ops[t.op].kind != "decode_attention" or not t.prologue:
        return False
    if not writer:
        writer.update({o.outputs[0]: o for o in ops.values() if o.kind != "view"})
    return attention_inputs(tg.graph, ops[t.op], fused, writer, {}) is not None


def box_loop_trips(kind: str, box) -> int:
    """The trips one thread of an element-wise body (BOX_KINDS) makes over `box` (per-dim [lo, hi) of
    its op's output) one after another: one per THREADS elements (a cache write walks its new rows,
    not the cache's positions); 0 for a body of any other kind."""
    if kind not in BOX_KINDS:
        return 0
    n = 1
    for i, (lo, hi) in enumerate(box):
        if not (kind == "cache_write" and i == 2):
            n *= max(0, hi - lo)
    return -(-n // THREADS)


# A norm's staged weight and bias come from HBM, cold (each layer's own, read once a step), and a
# load from HBM waits behind every copy in flight: on a chip whose SMs all stream, a trip each of
# about staged_us (the H200's 1.2 us, 3.0 until 2026-11-30, against 0.48 for a trip to L2), on a quiet chip the memory
# latency (staged_trip_us, at the busy weight as the task starts, busy_hop_weight; at most 1: an
# `ahead` of 3 on up_proj moves the 1B expert by 0.4% on an H200, and copies_busy's growth past 1
# made it 10%). The body stages them before it polls its input, so a task whose SM waits for its
# inputs takes them into that wait (hide, simloop). GPT-2 large's ln_2 fused into mlp.fc stages its
# weight and bias in each of the 128 fc tasks as their rings start together: the sim called the
# fusion 5.1% faster than the expert at L2's latency and 3.0% slower at this, where an H200 ran it
# 6.2% slower (git show a951456:bench/results/sim_bisect.json); the 56 rows of that morning's adversary file (sim_adversary.json of
# 2026-11-29T04:58) go from 11 / 11 / 11 / 18% worst searched speedup off to 9 / 13 / 7 / 13%
# (Spearman 0.60 / 0.86 / 0.83 / 0.77 to 0.75 / 0.81 / 0.90 / 0.89), the bisect's 98 variants from
# 6.8% mean error over their starts to 5.5%, attention_positions' 60 runs from 6.7% median error to
# 6.3%. At the 1.2 us the H200 takes since 2026-11-30 (devices.py) the fusion reads 0.9% slower. An rmsnorm a matmul
# computes on chip loads its weight to registers before its input as well; priced so, the SmolLM2
# and Qwen3 experts, which do that in every layer, read 15-17% slower than measured (not charged).
def norm_staged(op) -> int:
    """The parameters a norm's body (NORM_KINDS) stages before its rows, one trip each: an RMSNorm's
    weight, a LayerNorm's weight and bias where it has them; 0 for a body of any other kind."""
    if op.kind == "rmsnorm":
        return int(len(op.inputs) > 1)
    if op.kind == "layernorm":
        return int(bool(op.attrs.get("weight"))) + int(bool(op.attrs.get("bias")))
    return 0


def norm_trips(op, box) -> int:
    """The trips a norm's body (NORM_KINDS) makes one after another over `box` of its output: its weight
    and bias staged (where it has them: norm_staged), then a row at a time; 0 for a body of any other kind."""
    if op.kind not in NORM_KINDS:
        return 0
    return norm_staged(op) + max(0, box[0][1] - box[0][0])


# A matmul that computes an rmsnorm on chip (codegen's onchip: Qwen3's and SmolLM2's experts fuse each
# layer's norms into q/k/v and gate/up) loads the norm's weight to registers before it stages its
# input: one trip more before its rows, priced at the memory latency (every task of the op reads the
# same weight, in L2 after the first), which a task whose SM waits for its inputs takes into that wait
# (the first call's loads go before the polls: hide). Unpriced, a second such task on an SM was free: Qwen3's
# expert with v_proj in 8-row tiles (some SMs running two q/k/v tasks) read 0.1% faster in the sim and
# ran 4.3% slower on an H200 (ab_knobs_tiles_qwen3.json; a q/k/v task's input phase ~1.2 us,
# task_probe_qwen3_v8.json); priced, 3.4% slower. Over sim_adversary.json's rows the worst searched
# speedup off the GPU's went 4.3 / 3.8 / 7.5 / 4.8% -> 3.2 / 3.0 / 5.6 / 4.8% (llama-1b, SmolLM2,
# Qwen3, GPT-2 large; Spearman 0.60 / 0.86 / 0.89 / 0.98 -> 0.74 / 0.98 / 0.93 / 0.98), and
# the a951456 sim_bisect.json's 150 variants from 4.5% mean error over their starts to 4.0% (median 3.3 -> 2.2%);
# the experts move by under 0.5 us (their tasks wait). The ring is not credited with loading during
# the trip: as a round trip (task_trips) a task that waited would have been faster for it (the ring
# counted as loading through the wait and the trip both); so priced the scores were about the same
# (Qwen3 5.2%, llama-1b's Spearman 0.60). Session 34 priced the load at staged_us (a norm's own
# cold stage, 3.0 us) and the experts read 15-17% slow.
def onchip_norm_loads(plan: Plan) -> list[int]:
    """Per task, how many times its matmuls load an rmsnorm's weight to compute the norm on chip
    (_on_chip_readers; norms with a weight): once per matmul call that stages its input so, and once
    for all the matmuls of a real epilogue (codegen.epilogue_ops), which stage it together; each a trip
    before its rows (see above). Kept on the task graph."""
    def count(tg, t, ops, on_chip):
        chain = {p for p, _ in t.prologue} | {t.op}
        n = 0
        for norm in {p for p, _ in t.prologue if ops[p].kind == "rmsnorm" and len(ops[p].inputs) > 1}:
            readers = on_chip.get(norm, set()) & chain
            n += min(1, len(readers)) if readers and t.op in _epilogues(plan) else len(readers)
        return n
    return _per_task_kept(plan, "onchip", count)


# A matmul's rows wait for its input vector: each call stages x (its batch rows of K) into shared
# memory before its compute warps take a weight row (codegen._stage_x), while the ring streams the
# weights beside it. An H200's task dumps time it from a task's start to its input on chip, in tasks
# whose inputs were long ready (an op's second task on an SM, or a task after another op's): 0.57-0.65
# us for Qwen3's and SmolLM2's projections (x of 1,024-2,048), 0.62-0.90 for llama-1b's k/v/up (2,048),
# 1.14-1.26 for its down_proj (8,192), 0.75 for GPT-2 large's k/v (2 rows of 1,280): about a memory
# latency and x's bytes as the kernel keeps them (LL words) at plain_gbs. The sim ran it beside the
# rows; the GPU runs it before them. A waiting SM stages x as it polls, so the wait takes it in from
# the task's compute path. GPT-2's fc+GELU in 8-column tiles (five tasks an SM, each staging x again)
# read 5.1% slower than the expert in the sim and ran 16.7% slower (task_probe_gpt2_act_tiles.json);
# with this and the second trip of a matmul's call (task_trips), 15.3% slower.
def input_stagings(plan: Plan) -> list[tuple[int, int, int, int]]:
    """Per task, (calls, bytes as LL words, bytes in x's dtype, the first call's bytes as LL words) of
    the input vectors its matmul calls stage (the streamed body's, codegen._streams: the generic body
    stages none): its own op's and each fused matmul run as a call of its own; the matmuls of a real
    epilogue (codegen.epilogue_ops) share one. Kept on the task graph."""
    epi = _epilogues(plan)
    seen: dict[tuple, tuple[int, int, int, int]] = {}   # (every task of an op with the same fusions stages alike)

    def count(tg, t, ops, on_chip):
        key = (t.op, *(p for p, _ in t.prologue))
        got = seen.get(key)
        if got is None:
            got = seen[key] = _stagings(tg.graph, t, ops, t.op in epi)
        return got
    return _per_task_kept(plan, "inputs", count)


def _stagings(g, t, ops: dict, epilogue: bool) -> tuple[int, int, int, int]:
    """input_stagings of one task (`epilogue`: its op is a real epilogue). The prologue's matmuls are
    called first (its producers), the op's own last."""
    mats = [n for n in [p for p, _ in t.prologue] + [t.op] if ops[n].kind == "matmul" and _streams(g, ops[n])]
    if epilogue:
        mats = mats[:1]
    ll = plain = first = 0
    for n in mats:
        x = g.tensors[ops[n].inputs[0]]
        elems = math.prod(g.tensors[ops[n].outputs[0]].shape[:-1]) * x.shape[-1]
        plain += elems * torch_dtype(x.dtype).itemsize
        ll += elems * LL_WORD_BYTES.get(x.dtype, torch_dtype(x.dtype).itemsize)
        first = first or ll
    return len(mats), ll, plain, first


def _input_arrays(plan: Plan, hops: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(calls, bytes, the first call's bytes) of input_stagings as float arrays, the bytes as the kernel
    keeps x under `hops` (LL words, or x's dtype); read-only, kept on the task graph."""
    tg, key = plan.tg, "_input_arrays_" + hops
    cached = tg.__dict__.get(key)
    if cached is None:
        st = np.array(input_stagings(plan), dtype=float).reshape(-1, 4)
        cached = tg.__dict__[key] = (_frozen_floats(st[:, 0]), _frozen_floats(st[:, 1 if hops == "ll" else 2]),
                                     _frozen_floats(st[:, 3]))
    return cached


def _on_chip_readers(g, ops: dict) -> dict[str, set[str]]:
    """Per rmsnorm, the matmuls that compute it on chip when it is fused into their task (codegen's
    onchip: a matmul reading it as its input stages the norm's input and normalises it in place, its
    weight in registers: no call and no trips of its own)."""
    return {n.name: {m.name for m in ops.values() if m.kind == "matmul" and m.inputs[0] == n.outputs[0]
                     and onchip_norm_problem(g, n, m) is None}
            for n in ops.values() if n.kind == "rmsnorm"}


def _call_trips(tg, t, ops: dict, on_chip: dict[str, set[str]], absorbs: bool = True,
                epilogues: frozenset | None = None) -> int:
    """A task's trips past its first that its fused producers and its body make: one per producer run as a
    call of its own (not a matmul of an op in `epilogues`, codegen.epilogue_ops: a real epilogue, one
    call with the op; None: every matmul; nor an rmsnorm a matmul of the task computes on chip:
    `on_chip`, _on_chip_readers), but one in all for a decode attention's ropes and cache writes
    where it stages them together in its body (`absorbs`: _absorbs); and each element-wise or norm
    body's trips past its first (box_loop_trips, norm_trips), its own op's and its calls'."""
    chain = {p for p, _ in t.prologue} | {t.op}
    calls = [(p, box) for p, box in t.prologue if not on_chip.get(p, set()) & chain
             and (ops[p].kind != "matmul" or (epilogues is not None and t.op not in epilogues))]
    staged = [p for p, _ in calls if absorbs and ops[t.op].kind == "decode_attention"
              and ops[p].kind in STEP_INPUT_KINDS]
    # (a matmul's call makes two: see the note above task_trips)
    trips = len(calls) - len(staged) + (1 if staged else 0) + sum(1 for p, _ in calls if ops[p].kind == "matmul")
    bodies = [(p, box) for p, box in calls if p not in staged and ops[p].kind in BOX_KINDS + NORM_KINDS]
    if ops[t.op].kind in BOX_KINDS + NORM_KINDS:
        bodies.append((t.op, task_boxes(tg, t, ops[t.op])[0]))
    for name, box in bodies:
        op = ops[name]     # (a tile's box may run past its op's output)
        box = tuple((lo, min(hi, d)) for (lo, hi), d in zip(box, tg.graph.tensors[op.outputs[0]].shape))
        trips += max(0, (norm_trips(op, box) if op.kind in NORM_KINDS else box_loop_trips(op.kind, box)) - 1)
    return trips


def task_staged(plan: Plan) -> list[int]:
    """Per task, how many of its trips stage a norm's parameters (norm_staged of its own op and of the
    norms its prologue runs as calls); kept on the task graph."""
    return _per_task_kept(plan, "staged", lambda tg, t, ops, on_chip: _staged_loads(t, ops, on_chip))


def _staged_loads(t, ops: dict, on_chip: dict[str, set[str]]) -> int:
    """norm_staged of a task's own op and of each norm its prologue runs as a call (_call_trips' calls;
    not an rmsnorm a matmul of the task computes on chip: see the note above norm_staged)."""
    chain = {p for p, _ in t.prologue} | {t.op}
    names = [p for p, _ in t.prologue if ops[p].kind in NORM_KINDS and not on_chip.get(p, set()) & chain]
    return sum(norm_staged(ops[n]) for n in names + [t.op])


def _kept_float_array(plan: Plan, fn) -> np.ndarray:
    """fn(plan), a per-task count, as a float array (read-only; kept on the task graph under fn's name)."""
    tg, key = plan.tg, "_array_" + fn.__name__
    cached = tg.__dict__.get(key)
    if cached is None:
        cached = tg.__dict__[key] = np.asarray(fn(plan), dtype=float)
        cached.flags.writeable = False
    return cached


def _task_trip_array(plan: Plan) -> np.ndarray:
    """task_trips as a float array (read-only; kept on the task graph)."""
    return _kept_float_array(plan, task_trips)


def _onchip_array(plan: Plan) -> np.ndarray:
    """onchip_norm_loads as a float array (read-only; kept on the task graph)."""
    return _kept_float_array(plan, onchip_norm_loads)


def _staged_tasks(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(the tasks that stage a norm's parameters, how many each: task_staged), read-only arrays kept on
    the task graph, so a prediction does not convert every task's count again."""
    tg = plan.tg
    cached = tg.__dict__.get("_staged_tasks")
    if cached is None:
        staged = np.asarray(task_staged(plan), dtype=float)
        idx = np.flatnonzero(staged)
        cached = tg.__dict__["_staged_tasks"] = (idx, staged[idx])
        for a in cached:
            a.flags.writeable = False
    return cached
