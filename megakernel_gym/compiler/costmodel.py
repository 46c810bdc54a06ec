"""Cost model and the `sim` backend: predicted megakernel latency of a plan on a GPU.

Per task: the bytes it must move (each read region and its output tile once, less the weight
bytes the SM's weight ring loaded while it waited for the task's inputs: ring_bytes, RING_BYTES)
at the bandwidth one SM gets while the SMs streaming beside it stream together (stream_rate: each
alone at its own rate, together short of the chip's HBM bandwidth until many stream, each SM's
share weighted by the copies its ring keeps in flight: ring_share; the rings preloading while their
SMs wait and the L2 prefetches streaming ahead of their tasks count beside them: prefetch_terms,
which also reads again the prefetched bytes the L2 cannot hold until their rings take them): its ring-fed
weights at sm_gbs times the share of the ring's stages its rows fill (ring_fill_array), the rest
(KV caches, activations) at plain_gbs; plus the memory latency (or, where the schedule prefetches
its weights, the cost of issuing the prefetch) and one more for each round trip its body makes one
after another (task_trips: an element-wise body's threads take THREADS elements a trip; a norm's
staged weight and bias from HBM, slower while the chip streams: staged_trip_us), and its
compute, whichever is larger: its flops over its SM's share of the tensor-core rate, or its compute
warps' time through its ring stages (ring_consume_us), plus a decode attention's K and V rows and
flops at attn_gbs and attn_gflops, over the positions it attends (pos + 1; the judge's pos is uniform,
so half the cache on average: attended_positions), after those round trips (a prologue's come
before its rows, an epilogue's after); plus a fixed per-task overhead and the cost of polling each
counter it waits on. Across SMs: each SM runs its queue in order; a task starts when its SM is free
and every group of producers it waits on has finished (plus the latency of seeing that in global
memory: the wait latency, shorter from a producer whose weight ring keeps fewer copies in flight,
hop_us, and on a device with a quiet_wait_us shorter as fewer SMs stream when the producer signals,
busy_hop_us; plus, for a group of many like producers, the spread of their finishes the schedule does
not draw: compiler/waits.py), less the memory latency its polls (and a norm's staged parameters) spent
while its SM waited (polled_latency). The prediction is the last finish plus one kernel launch.

What a task waits on follows the kernel's hops (compiler/hops.py, emit_cuda's `hops`): with
counters, each counter of the plan it waits on (an op counter makes it wait for every producer
of the op); with LL words, the default kernel, the producers of the data it reads (its task
graph dependencies), however the plan's counters are laid out, since a reader polls the words
it reads. Counter granularity then costs nothing, as measured (bench/results/ab_knobs_ll.json,
megakernel_schedules.json).

All device constants live in DEVICES, fitted to measured megakernels (compiler/calibrate.py): the
H100's to the 1B decoder's schedules, the H200's to four families' schedules, an adversary's among them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from megakernel_gym.compiler.codegen import (INFLIGHT, WARPS, WS_MAX_STAGES, WS_SEG, WS_STAGE, _streams, ring_packed)
from megakernel_gym.compiler.hops import HOPS
from megakernel_gym.compiler.interpret import torch_dtype
from megakernel_gym.compiler.pause_gc import gc_paused
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.simloop import csr, list_schedule
from megakernel_gym.compiler.tasks import dep_edges, input_boxes, per_task, task_boxes
from megakernel_gym.compiler.waits import busy_scale, group_tail, spread_z
from megakernel_gym.compiler.devices import (  # noqa: F401  (costmodel's names for them)
    DeviceSpec, DATASHEET, DEVICES)
from megakernel_gym.compiler.work import (  # noqa: F401  (costmodel's names for them)
    _cache_share, _nbytes, _op_flops, attended_positions, fed_positions, positions_input, required_bytes)
from megakernel_gym.compiler.codecost import (  # noqa: F401  (costmodel's names for them)
    SMALL_KINDS, cold_code, cold_code_chars, first_call_us, light_task_us, light_tasks)
from megakernel_gym.compiler.trips import (  # noqa: F401  (costmodel's names for them)
    _op_index, _frozen_floats, TRIPS, SPLIT_TRIPS, STEP_INPUT_KINDS, BOX_KINDS, NORM_KINDS,
    _per_task_kept, task_trips, _epilogues, _absorbs, box_loop_trips, norm_staged,
    norm_trips, onchip_norm_loads, input_stagings, _stagings, _input_arrays, _on_chip_readers,
    _call_trips, task_staged, _staged_loads, _kept_float_array, _task_trip_array, _onchip_array,
    _staged_tasks)


def _op_spread_array(plan: Plan, queues: tuple | None = None) -> np.ndarray:
    """Per op index (_op_index), how many SMs its tasks run on (`queues`: _queue_csr's, if known)."""
    names, idx = _op_index(plan.tg)
    ptr, flat = queues if queues is not None else _queue_csr(plan)
    sm = np.full(len(idx), -1, dtype=np.int64)
    sm[flat] = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    on = sm >= 0                    # a task on no queue runs on no SM
    used = np.zeros((len(names), max(len(plan.queues), 1)), dtype=bool)
    used[idx[on], sm[on]] = True
    return used.sum(axis=1)


def op_spread(plan: Plan) -> dict[str, int]:
    """Per op, how many SMs its tasks run on: the SMs that share HBM bandwidth while it streams."""
    names, _ = _op_index(plan.tg)
    return {op: int(k) for op, k in zip(names, _op_spread_array(plan)) if k}


def _task_keys(tg) -> tuple[list[tuple], np.ndarray]:
    """(distinct (op, fused producers...) of the tasks, each task's index into them), kept on the task graph."""
    cached = tg.__dict__.get("_prefetch_keys")
    if cached is None:
        keys: dict[tuple, int] = {}
        each = per_task(tg, "prefetch_key", lambda tg, tasks: [(t.op,) + tuple(p for p, _ in t.prologue) for t in tasks])
        idx = np.fromiter((keys.setdefault(k, len(keys)) for k in each), dtype=np.int64, count=len(tg.tasks))
        cached = tg.__dict__["_prefetch_keys"] = (list(keys), idx)
    return cached


def prefetched(plan: Plan) -> list[bool]:
    """Per task, whether the schedule prefetches its weights: its op's depth, or a fused producer's."""
    return (prefetch_depths(plan, 1) > 0).tolist()


def prefetch_depths(plan: Plan, least: int = 2) -> np.ndarray:
    """Per task, the prefetch depth codegen gives its weights: its op's, or a fused producer's, the
    deepest (all 0 where no op's depth reaches `least`)."""
    depth = (plan.knobs.prefetch if plan.knobs else {}) or {}
    if not any(v >= least for v in depth.values()):
        return np.zeros(len(plan.tg.tasks), dtype=np.int64)
    keys, idx = _task_keys(plan.tg)
    d = np.array([max(depth.get(o, 0) for o in k) for k in keys], dtype=np.int64)
    return d[idx]


# An L2 prefetch (the `prefetch` edit) was priced as its issue latency alone, prefetch_us in place of the
# memory latency, and the sim read every one within 0.2% of the schedule without it. On an H200
# (ab_knobs_s49_probe.json, ab_knobs_s49_prefetch.json, ab_knobs_s49_qwen3.json) lm_head prefetched at
# depth 2 ran llama-1b's expert 5.8% slower, its default 4.5%, Qwen3's expert 3.3% and default 2.0%; at
# depth 1 llama-1b's expert 4.9%; gate/up at depth 2 11.7%; small ones (a layer's gate at 1, a v_proj at
# 2) within 0.1%. A task's whole tile goes to L2 in one bulk request, so 128 SMs each sending 4 MB of
# lm_head's 525 MB overflow a 50 MB L2 whatever the depth, and gate/up's 64 MB a layer, sent while o_proj
# streams, also stand in the latency chain's way. Fitted on those rows and scored on every H200 row by
# bench/sim_score.py (docs/compiler.md): prefetch_reread 0.4, prefetch_stream 2 (1 scored the same but
# for gate/up, read 5.8%).
def prefetch_terms(plan: Plan, queues, prev: np.ndarray, start: np.ndarray, finish: np.ndarray, wb: np.ndarray,
                   rate: np.ndarray, l2_bytes: float):
    """(per task: the share of its ring-fed weight bytes read from HBM twice, the prefetch streams as
    (start, end) arrays): a task's L2 prefetch of depth d goes out as the task d-1 places before it in
    its SM's queue is dequeued (d = 1: as the task itself is, before its wait). Its bytes wait in L2
    until its ring reads them; chip-wide, time-averaged over the task's span from issue to finish
    (all its bytes before it starts, half on average while it runs), where they pass `l2_bytes` the
    excess share is evicted (predict reads dev.prefetch_reread of it again). The stream: from issue,
    at the task's rate, until the task starts (predict weights it dev.prefetch_stream beside the
    tasks streaming then). `prev`: per task, its SM's previous finish (0 for a queue's first), when
    its queue dequeues it."""
    n = len(start)
    out = np.zeros(n)
    depth = prefetch_depths(plan, 1)
    empty = (np.zeros(0), np.zeros(0))
    if not (depth >= 1).any():
        return out, empty
    q_ptr, q_tasks = queues
    h = np.arange(len(q_tasks))
    first = np.repeat(q_ptr[:-1], np.diff(q_ptr))
    d = depth[q_tasks]
    issue = prev[q_tasks[np.maximum(first, h - np.maximum(d - 1, 0))]]
    sel = (d >= 1) & (wb[q_tasks] > 0)
    if not sel.any():
        return out, empty
    t, iss = q_tasks[sel], issue[sel]
    s0, f0 = start[t], finish[t]
    if l2_bytes > 0:
        # the bytes waiting, time-averaged over each task's span from issue to finish (weight 0 for the
        # spans themselves: only the waiting bytes count)
        held = streaming_concurrency(iss, f0, np.ones(len(t), dtype=bool), np.zeros(len(t)),
                                     (np.concatenate([iss, s0]), np.concatenate([s0, f0]),
                                      np.concatenate([wb[t], wb[t] / 2])))
        out[t] = np.where(f0 > iss, np.maximum(0.0, 1.0 - l2_bytes / np.maximum(held, 1.0)), 0.0)
    end = np.minimum(s0, iss + wb[t] / np.maximum(rate[t], 1e-9))
    return out, (iss, end)


def stream_rate(spread, sm_gbs: float, hbm_gbs: float):
    """GB/s one SM streams while `spread` SMs stream together: alone sm_gbs, together never past
    hbm_gbs, and short of it on the way (a few SMs' loads in flight do not keep HBM busy):
    hbm / spread * (1 - exp(-spread * sm / hbm)). With min(sm, hbm / spread) in its place, 64 SMs
    streamed as fast as 128 in the model; an H100 measured an MLP on 64 of them 0.5-4% slower
    (ab_knobs_near.json), and the refit with this form ranks the 66 measured schedules better (Spearman
    0.949 against 0.909 for 61 of them with the old form)."""
    k = np.maximum(np.asarray(spread, dtype=float), 1e-9)
    return hbm_gbs * -np.expm1(-k * sm_gbs / hbm_gbs) / k


def task_bandwidth_terms(plan: Plan, nbytes: list[int]) -> tuple[list[float], list[float]]:
    """Per task (its bytes, its bytes x its op's SM spread): what stream_rate's rate applies to (the
    spread is their ratio)."""
    own, shared = _bandwidth_arrays(plan, np.asarray(nbytes, dtype=float))
    return own.tolist(), shared.tolist()


def _bandwidth_arrays(plan: Plan, own: np.ndarray, queues: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    _, idx = _op_index(plan.tg)
    return own, own * _op_spread_array(plan, queues)[idx]


# A task's signal is seen late by as much as the copies in flight it waits behind: the signal's
# fence waits for its SM's bulk copies in flight, and a poll waits behind the chip's (one SM's word
# took 7.7 us to be seen with 5 stages in flight everywhere, 1.0 with 2, 0.26 with 1:
# bench/results/poll_probe.json). So a hop's latency scales with the copies the producer's weight
# ring keeps in flight when it signals (ring_caps: the inflight cap of the next ring call in its
# queue, which the IR's `inflight` edit sets), by DeviceSpec.capped_wait per copy away from the
# compiler's INFLIGHT, never below HOP_FLOOR of the wait latency. capped_wait 0 (the shipped
# constants until a refit under the cap measures it) is one wait latency for every hop. The `ahead`
# edit (a cap while the matmul's task still waits) is in it only chip-wide: both edits cost on the GPU
# (an H200 ran llama-1b's default with an adversary's inflight edits 2.4% slower and with its ahead
# edits 2.0%, Qwen3's ahead edits 5.6%: git show a951456:bench/results/sim_bisect.json), and where the device has a
# quiet_wait_us every SM streaming adds to every hop by the copies its ring keeps in flight
# (busy_hop_weight, copies_busy; own_caps: its `inflight` while its task runs, its `ahead` while its
# ring preloads).
HOP_FLOOR = 0.05


def own_caps(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Per task, the copies in flight its own ring keeps for its weights (its op's or a fused matmul
    producer's `inflight`, the smallest where several, else INFLIGHT) while it runs, and while it
    waits for its inputs (its `ahead` where set, else the same)."""
    knobs = plan.knobs
    caps = (knobs.inflight if knobs else {}) or {}
    ahead = (knobs.ahead if knobs else {}) or {}
    n = len(plan.tg.tasks)
    if not caps and not ahead:
        return np.full(n, float(INFLIGHT)), np.full(n, float(INFLIGHT))
    keys, idx = _task_keys(plan.tg)

    def smallest(cap: dict[str, int]) -> np.ndarray:       # per task: the smallest of its ops' caps
        return np.array([min([cap[o] for o in k if o in cap] or [INFLIGHT]) for k in keys], dtype=float)[idx]

    return (smallest({o: caps[o] or INFLIGHT for o in caps}),
            smallest({o: ahead.get(o) or caps.get(o) or INFLIGHT for o in set(caps) | set(ahead)}))


# HBM serves the copies in flight, not the SMs: an SM whose ring keeps fewer copies in flight than
# the others gets that much less of what the chip delivers (Little's law: each SM's rate is its bytes
# in flight over the latency they all see). On an H200 llama-1b's gate_proj with `inflight` 1 on
# one half of the chip streamed its rows at 20.6 GB/s an SM while up_proj, at the compiler's 2 on
# the other half, streamed 35.8 at the same moment (task_probe_llama_climb6_dump.json: an adversary's
# climb 6 from the default, sim 12.6% faster than the default where the GPU ran 13.9% slower). The
# model gave both the same rate, so a cap of 1 cost nothing and lightened every hop. The chip
# delivered less in all: gate and up together 2.3 TB/s, where the default's gate and up, both at 2 on
# every SM, took 4.3. A task's ring streams at its share times stream_rate of the shares streaming
# beside it: a chip where every SM keeps 1 copy in flight streams less than one where every SM keeps
# 2, as stream_rate's curve is short of HBM there, and within a chip the SMs divide it by their
# copies. (An H200 ran llama-1b's default with every ring at 1 9.9% slower and its expert 17.5%,
# where this says 19.8 and 27.5%: task_probe_llama_all_inflight1.json. An H100 ran the 1B expert
# with every ring at 1 as fast as at 2, 1,029.2 and 1,029.1 us, ab_knobs_inflight_combos.json; its
# HBM is 30% slower, within what 1 copy an SM keeps busy. A form that kept the chip's total at any
# cap scored worse on the adversary's rows: llama-1b's worst searched speedup 20% off, Spearman
# 0.24, against 14.5% and 0.71.)
def ring_share(plan: Plan, waiting: bool = False) -> np.ndarray:
    """Per task, its ring's weight in the chip's HBM: the copies it keeps in flight while it runs
    (own_caps; `waiting`: while its SM waits for its inputs and the ring preloads, its `ahead` cap
    where set, so an `ahead` of 1 preloads at half the rate) over the compiler's INFLIGHT, at most 1.
    More copies than INFLIGHT take no more: the
    ~20 GB/s an SM of part-filled rows did not move with twice the copies (see ring_fill_array), and
    an adversary searched against shares up to 2.5 (5 copies) found caps of 3 the sim called 5%
    faster than the expert (llama-1b's climb 3 from the expert, 2026-11-29) where an H200 ran them
    at the expert's time; at most 1, the sim agrees (886 us against the expert's 884). A task keeps
    no more copies in flight than it has stages, whatever its cap: its share is of the copies it
    could keep at the compiler's cap, so a one-stage task (Qwen3's expert's o_proj tasks, each
    32 KB) loses nothing at a cap of 1. The sim had read the expert's o_proj caps of 1 raised to 2
    2.1% faster (ahead: 2.0%) where an H200 ran them at the expert's time (0.999; ahead 0.989:
    ab_knobs_attn_caps.json); now 1.000 and 0.998, and the adversary's worst searched speedup on
    Qwen3 10.0% -> 7.5% off (sim_adversary.json; the other families' unchanged)."""
    run, wait = own_caps(plan)
    # a ring preloads no faster than it streams once its task runs: an `ahead` cap above the task's own
    # `inflight` cap (the expert keeps q/k/v at 1) buys no rate while the chip streams beside it. Qwen3's
    # expert with `ahead ... q_proj n=3` over its cap of 1 read 1.1% faster (the adversary's climb 0 from
    # the expert, searched against the cut busy hop: its whole gain) and ran 1.4% slower on an H200;
    # llama-1b's 0.2% faster, ran 0.3% slower (ab_knobs_qwen3_ahead.json, ab_knobs_llama_ahead.json)
    caps = np.clip(np.minimum(wait, run) if waiting else run, 1, INFLIGHT)
    stages = np.maximum(1.0, np.ceil(_ring_stage_terms(plan)[0] / WS_STAGE))
    return np.minimum(caps, stages) / np.minimum(INFLIGHT, stages)


def ring_caps(plan: Plan) -> np.ndarray:
    """Per task, the copies in flight its SM's weight ring allows as the task signals: the cap of the
    next task in its queue that streams weights through the ring (its own op's or a fused matmul
    producer's; the smallest where several), and INFLIGHT where none follows (its own ring idles,
    the other SMs' keep the compiler's cap), so that a schedule without `inflight` or `ahead` edits
    has INFLIGHT everywhere and hops as before. That next task has not started when this one
    signals (it needs this one's neighbours' outputs), so its cap is the one the kernel keeps while a
    task waits for its inputs: its `ahead` (Knobs.ahead) where set, else its `inflight`
    (Knobs.inflight), else codegen.INFLIGHT."""
    n = len(plan.tg.tasks)
    knobs = plan.knobs
    if not (knobs and (knobs.inflight or knobs.ahead)):
        return np.full(n, float(INFLIGHT))
    own = own_caps(plan)[1]
    ptr, flat = _queue_csr(plan)
    ring = np.flatnonzero(ring_bytes_array(plan)[flat] > 0)        # queue positions of ring-fed tasks
    pos = np.arange(len(flat))
    j = np.searchsorted(ring, pos + 1)                                # each position's next ring-fed one
    nxt = ring[np.minimum(j, max(len(ring) - 1, 0))] if len(ring) else pos
    end = np.repeat(ptr[1:], np.diff(ptr))                            # each position's queue end
    has = (j < len(ring)) & (nxt < end)
    out = np.full(n, float(INFLIGHT))
    out[flat[has]] = own[flat[nxt[has]]]
    return out


def hop_scale(caps, capped_wait: float) -> np.ndarray:
    """The wait latency's multiple for a hop from a ring with `caps` copies in flight (see above)."""
    return np.maximum(HOP_FLOOR, 1.0 + capped_wait * (np.asarray(caps, dtype=float) - INFLIGHT))


def hop_us(plan: Plan, dev: DeviceSpec):
    """How long after each task finishes its readers see it: the wait latency, scaled per task by
    the copies in flight its ring allows (ring_caps, hop_scale); a number where capped_wait is 0."""
    if not dev.capped_wait:
        return dev.wait_latency_us
    return dev.wait_latency_us * hop_scale(ring_caps(plan), dev.capped_wait)


# The weight ring (codegen): each SM streams its queue's matmul weights into shared memory ahead
# of the tasks, RING_BYTES at most, while a task waits for its inputs (before it starts, and during
# its round trips before its rows) and while the task before it runs; a call
# holds all but one of its last stages until its task has signalled, so one stage, FREE_BYTES, is
# all the next task's weights get in before that.
RING_BYTES = WS_MAX_STAGES * WS_STAGE
FREE_BYTES = WS_STAGE


def ring_bytes(plan: Plan) -> list[int]:
    """Per task, the weight bytes its ring-fed matmuls stream (its own op's and its fused matmul
    producers'), which the ring may load before the task starts; found with the task costs and
    kept on the task graph."""
    return ring_bytes_array(plan).tolist()


def ring_bytes_array(plan: Plan) -> np.ndarray:
    """ring_bytes as a float array (kept on the task graph)."""
    tg = plan.tg
    cached = tg.__dict__.get("_ring_bytes_array")
    if cached is None:
        task_costs(plan)
        cached = tg.__dict__["_ring_bytes_array"] = np.asarray(tg.__dict__["_ring_bytes"], dtype=float)
        cached.flags.writeable = False
    return cached


def ring_fed_bytes(plan: Plan, nbytes) -> np.ndarray:
    """Per task, the part of its bytes (`nbytes`, per task) its weight ring streams: its ring_bytes,
    never more than the task's bytes; it loads the rest itself (plain_gbs)."""
    return np.minimum(ring_bytes_array(plan), np.asarray(nbytes, dtype=float))


# The ring's copies are counted in stages, not bytes: its producer keeps INFLIGHT stages in flight,
# so an SM streams alone at about INFLIGHT x WS_STAGE over the memory latency (sm_gbs, fitted on the
# 1B decoder, whose 4,096-byte rows fill every stage), and a task whose rows fill its stages only in
# part (ring_stage_bytes) streams its weights at that share of sm_gbs and holds that share of
# RING_BYTES ahead. (The ~20 GB/s an SM the H200's probes timed through such rows, where full stages
# get ~27, did not move with twice the copies in flight: there the compute warps set the pace,
# ring_consume_us.)
def ring_fill_array(plan: Plan) -> np.ndarray:
    """Per task, its ring-fed weight bytes over the stage bytes that carry them (1 for a task with
    none); kept on the task graph."""
    tg = plan.tg
    cached = tg.__dict__.get("_ring_fill_array")
    if cached is None:
        st = _ring_stage_terms(plan)[0]
        cached = tg.__dict__["_ring_fill_array"] = _frozen_floats(
            np.divide(ring_bytes_array(plan), st, out=np.ones(len(st)), where=st > 0))
    return cached


# The chip's HBM is one budget: every SM streaming at the same moment shares it, whichever op its
# task belongs to. A task's streaming rate is stream_rate of the SMs streaming while it runs (the
# time-averaged count of tasks with bytes to move whose [start, finish) overlaps its own), which
# the list schedule itself decides: predict starts from each op's SM spread (what an op spread over
# the whole chip streams at) and re-schedules with the concurrency the last schedule showed,
# SPREAD_ROUNDS times. With the op's spread alone, two independent ops on disjoint halves of the
# chip streamed 2 x 0.535 of HBM together in the sim (issue 39; an H100 ran them 2.6% slower than
# the expert schedule the sim said they beat by 6%). Each round after the first keeps SPREAD_DAMPING
# of the spread and hop weights it had: taken whole, the rounds did not converge (the 1B default
# moved by up to 2% from one round to the next, and edits that change nothing the GPU sees, an
# `ahead` cap or op-wide counters, read 0.3-0.5% faster or slower as the last round fell), which a
# policy searching the sim would learn.
SPREAD_ROUNDS = 3
SPREAD_DAMPING = 0.5


def _sweep(start: np.ndarray, finish: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals [start, finish) as events: their times in order and the summed `weight` of the
    intervals open after each."""
    ts = np.concatenate([start, finish])
    step = np.concatenate([weight, -weight])
    order = np.argsort(ts, kind="stable")
    return ts[order], np.cumsum(step[order])


def streaming_concurrency(start: np.ndarray, finish: np.ndarray, streams: np.ndarray, weight=None,
                          also=None) -> np.ndarray:
    """Per task, the time-averaged number of streaming tasks (`streams`: a bool per task) running
    while it runs, itself included (1 for a task of no duration or one that moves no bytes); with
    `weight` (per task: ring_share), the time-averaged sum of their weights (its own for a task
    alone). `also`: more streams (start, finish, weight arrays) that count beside them, such as the
    rings preloading while their SMs wait."""
    start, finish = np.asarray(start, dtype=float), np.asarray(finish, dtype=float)
    on = np.asarray(streams, dtype=bool) & (finish > start)
    out = np.ones(len(start))
    if not on.any():
        return out
    s, f = start[on], finish[on]
    w = np.ones(len(s)) if weight is None else np.asarray(weight, dtype=float)[on]
    if also is not None:
        a0, a1, aw = (np.asarray(x, dtype=float) for x in also)
        keep = a1 > a0
        ts, active = _sweep(np.concatenate([s, a0[keep]]), np.concatenate([f, a1[keep]]),
                            np.concatenate([w, aw[keep]]))
    else:
        ts, active = _sweep(s, f, w)
    integral = np.concatenate([[0.0], np.cumsum(active[:-1] * np.diff(ts))])
    got = (integral[np.searchsorted(ts, f)] - integral[np.searchsorted(ts, s)]) / (f - s)
    out[on] = np.maximum(got, 1.0 if weight is None else w)
    return out


def streaming_demand_at(times: np.ndarray, start: np.ndarray, finish: np.ndarray,
                        rate: np.ndarray) -> np.ndarray:
    """The summed streaming rate (`rate` per task, over [start, finish)) of the tasks running just
    before each of `times` (a task that ends at that instant still counts)."""
    return _demand_at(_demand_sweep(start, finish, rate), times)


def _demand_sweep(start, finish, rate):
    """streaming_demand_at's sweep (event times, level after each), or None where nothing streams."""
    on = (finish > start) & (rate > 0)
    return _sweep(start[on], finish[on], rate[on]) if on.any() else None


def _demand_at(sweep, times) -> np.ndarray:
    """A _demand_sweep's level just before each of `times`."""
    if sweep is None:
        return np.zeros(len(times))
    ts, level = sweep
    i = np.searchsorted(ts, times, side="left") - 1       # events strictly before each time
    return np.where(i >= 0, level[np.maximum(i, 0)], 0.0)


# What one SM streaming through its ring adds to the chip's busyness, by the copies its ring keeps
# in flight (0-5: a ring of WS_MAX_STAGES stages has no more): a signal is seen 1.0 us after it is
# written with every SM keeping the compiler's INFLIGHT of 2 copies in flight, 1.8 with 3 and 7.7 with
# 5 (bench/results/poll_probe.json, an H100): over the quiet latency (0.26), 1, 2.1 and 10 times what
# 2 add (4 between, geometric). With 1 copy everywhere the probe saw 0.26 us, as on a quiet chip, but
# a cap of 1 counts here as 2 do: read as quiet, it let an adversary's climbs gain from caps of 1 the
# GPU did not give (commit 4abbef8's sim_adversary_copies.json), and the rows it ran say nothing of
# what 1 saves. A cap of 1 therefore never shortens a hop in the sim, and one above 2 costs (it also
# slows or speeds its own ring's streaming: ring_share).
# Those probe weights priced caps above 2 far over what schedules pay: every SM streams at its cap only
# while its capped op runs. From llama-1b's default on an H200 (ab_knobs_llama_inflight.json, 2026-11-30)
# o_proj at 3 ran 1.017x the default's time and the sim read 1.039x; gate_proj at 3 1.004x / 1.013x; both
# at 4 1.021x / 1.166x. Fitted to those: 1.4 at 3, 1.6 at 4 (1.018x, 1.006x, 1.024x), and 1.8 at 5,
# extrapolated (no schedule measured there). A cap above 2 still buys nothing (ring_share stops at 2).
COPIES_BUSY = np.array([0.0, 1.0, 1.0, 1.4, 1.6, 1.8])


def copies_busy(caps) -> np.ndarray:
    """COPIES_BUSY of each cap (copies in flight)."""
    return COPIES_BUSY[np.clip(np.asarray(caps, dtype=np.int64), 0, len(COPIES_BUSY) - 1)]


def busy_hop_weight(start, finish, streams, preload_from, preload_to, dev: DeviceSpec, *at) -> np.ndarray:
    """Per task, how busy the chip's memory is as it signals, 0 (no SM streams) to 1 (every SM streams
    with INFLIGHT copies in flight) and beyond (more copies), raised to dev.busy_power: each SM running
    a task that streams weights through its ring (`streams`: a pair of arrays, first per task what it
    adds while it runs, copies_busy of its cap, over [start, finish); then what its ring's preload of
    its weights adds, over [preload_from, preload_to)), over num_sms. With `at` (arrays of times): the
    same at each of those instead, a list of arrays (one sweep of the tasks for all)."""
    run, pre = streams
    sweeps = (_demand_sweep(start, finish, np.asarray(run, dtype=float)),
              _demand_sweep(preload_from, preload_to, np.asarray(pre, dtype=float)))
    # (at least 0: a sweep's running sums may end a hair below it, and a fractional busy_power of that is nan)
    out = [(np.maximum(_demand_at(sweeps[0], t) + _demand_at(sweeps[1], t), 0.0) / dev.num_sms) ** dev.busy_power
           for t in (at or (finish,))]
    return out if at else out[0]


def busy_hop_us(weight, dev: DeviceSpec):
    """A hop's wait latency at busy weight `weight` (busy_hop_weight): quiet_wait_us at 0,
    wait_latency_us at 1."""
    return dev.quiet_wait_us + (dev.wait_latency_us - dev.quiet_wait_us) * np.asarray(weight, dtype=float)


def staged_trip_us(weight, dev: DeviceSpec):
    """A norm's staged parameter load (one trip from HBM) at busy weight `weight`: the memory latency
    on a quiet chip, staged_us with every SM streaming (see norm_staged)."""
    busy = np.minimum(np.asarray(weight, dtype=float), 1.0)
    return dev.mem_latency_us + (dev.staged_us - dev.mem_latency_us) * busy


def busy_hops(hop, weight, dev: DeviceSpec) -> np.ndarray:
    """Per task, its hop (`hop`: hop_us's, at the full wait latency) at its busy weight (`weight`,
    busy_hop_weight)."""
    return hop / dev.wait_latency_us * busy_hop_us(weight, dev)


@dataclass
class Prediction:
    device: str
    latency_us: float
    floor_us: float                       # total bytes / bandwidth, or flops / rate
    busy_us: list[float]                  # per SM
    start_us: list[float] = field(repr=False, default_factory=list)    # per task
    finish_us: list[float] = field(repr=False, default_factory=list)
    preloaded: list[float] = field(repr=False, default_factory=list)   # per task: weight bytes the ring had in
    spread: list[float] = field(repr=False, default_factory=list)      # per task: SMs it shared HBM with, by ring_share
    hop_busy: list[float] = field(repr=False, default_factory=list)    # per task: busy_hop_weight (empty: all 1)

    @property
    def efficiency(self) -> float:
        return self.floor_us / self.latency_us if self.latency_us else 0.0


def task_costs(plan: Plan) -> tuple[list[int], list[float]]:
    """Bytes moved and flops for every task of the plan. A task's bytes are what it reads
    (fused producers' inputs in place of their outputs) and its output tile; its flops include
    the fused producers' work it repeats. They depend on the lowering alone, so they are kept on
    the task graph, which the lowering cache shares between plans (the sim's edits to SM ranges,
    counters, order or prefetch reuse them)."""
    tg = plan.tg
    cached = tg.__dict__.get("_task_costs")
    if cached is None:
        nbytes, flops, ring, *stage_terms, af, ab = ((list(v) for v in zip(*per_task(tg, "costs", _task_costs)))
                                                     if tg.tasks else ([], [], [], [], [], [], [], []))
        cached = tg.__dict__["_task_costs"] = (nbytes, flops)
        tg.__dict__["_ring_bytes"] = ring
        tg.__dict__["_ring_stage_terms"] = tuple(_frozen_floats(v) for v in stage_terms)
        tg.__dict__["_attention_work"] = _frozen_floats([ab, af])
    return list(cached[0]), list(cached[1])


def costs_at(plan: Plan, positions) -> tuple[list[int], list[float], np.ndarray]:
    """(bytes, flops, attention_work) per task with the step's pos given (one per sequence), where
    task_costs and attention_work take their expectation: what the plan costs at one draw of the
    inputs (bench/attention_positions.py times steps at chosen positions). predict(costs=) takes it."""
    if not plan.tg.tasks:
        return [], [], np.zeros((2, 0))
    nbytes, flops, *_, af, ab = (list(v) for v in zip(*_task_costs(plan.tg, plan.tg.tasks, positions)))
    return nbytes, flops, np.asarray([ab, af], dtype=float)


def attention_work(plan: Plan) -> np.ndarray:
    """[bytes, flops] per task of the decode attention it runs (its own or a fused producer's) at the
    expected positions: the K and V rows it attends and its flops, part of task_costs' bytes and flops
    but timed at attn_gbs and attn_gflops (compute_us). Read-only; kept on the task graph."""
    task_costs(plan)
    return plan.tg.__dict__["_attention_work"]


# A decode attention's time is its positions': a thread per position scores its key row against the
# group's q heads, then p.V (codegen's _decode_attention_parallel), on the CUDA cores, not the tensor
# cores the matmuls' flops are timed at. An H200 timed the default schedules' unsplit attention of four
# families at five positions each (bench/results/attention_positions.json): linear in the positions,
# 10.5 ns a position of a KV row for llama-1b (64-wide heads, 4 q heads a KV head), 10.3 for SmolLM2
# (64, 3), 8.0 for GPT-2 large (64, 1) and 17.7 for Qwen3 (128, 2): d x (0.113 + 0.0137 x group) ns
# within 4%, the rows' bytes at ~35 GB/s an SM plus their flops at ~290 GFLOP/s. The model had read
# the whole cache at plain_gbs (75 GB/s, ~2.5 ns a position) whatever the position.
def compute_us(plan: Plan, dev: DeviceSpec, flops, attn=None) -> np.ndarray:
    """Per task its compute time: the tensor cores' share of its flops, or its compute warps' time
    through its ring stages (ring_consume_us), whichever is longer, plus its attention's rows and
    flops (`attn`: attention_work's, its default) at attn_gbs and attn_gflops and, where it runs one,
    attn_task_us."""
    ab, af = attention_work(plan) if attn is None else np.asarray(attn, dtype=float)
    sm_rate = dev.tflops * 1e6 / dev.num_sms          # flops per us per SM
    tensor = np.asarray(flops, dtype=float) - af
    return (np.maximum(tensor / sm_rate, ring_consume_us(plan, dev))
            + ab / (dev.attn_gbs * 1e3) + af / (dev.attn_gflops * 1e3) + np.where(ab > 0, dev.attn_task_us, 0.0))


def _ring_stage_terms(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task (read-only, kept on the task graph with its costs): the ring stage bytes that carry
    its ring-fed weights, the stages of rows that are not packed, and the weight bytes times the
    batch rows (_ring_stages_of)."""
    task_costs(plan)
    return plan.tg.__dict__["_ring_stage_terms"]


def _task_cost_arrays(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """task_costs as float arrays (read-only; kept on the task graph)."""
    tg = plan.tg
    cached = tg.__dict__.get("_task_cost_arrays")
    if cached is None:
        nbytes, flops = task_costs(plan)
        cached = (np.asarray(nbytes, dtype=float), np.asarray(flops, dtype=float))
        for a in cached:
            a.flags.writeable = False
        tg.__dict__["_task_cost_arrays"] = cached
    return cached


def ring_stage_bytes(rows: int, rowb: int) -> int:
    """The ring's stage bytes that carry `rows` weight rows of `rowb` bytes (codegen's ws_at walks the
    same stages): packed rows (ring_packed) fill whole WS_STAGE stages; any other row width comes as
    one WS_SEG piece of each of WARPS rows a stage, so a 2,560-byte row (K = 1,280 in bf16) fills
    62.5% of its stages and a 2,048-byte one half."""
    if rows <= 0 or rowb <= 0:
        return 0
    if ring_packed(rowb):
        per = WARPS // (rowb // WS_SEG)
        return -(-rows // per) * WS_STAGE
    return -(-rows // WARPS) * -(-rowb // WS_SEG) * WS_STAGE


def _ring_stages_of(g, op, box) -> tuple[int, int, int]:
    """(ring_stage_bytes, the stage count where the rows are not packed (0 where they are), and the
    weight bytes times the matmul's batch rows: ring_consume_us's terms) of a task's box of a ring-fed
    matmul's NK weight."""
    weight = op.inputs[1]
    (r0, r1), (c0, c1) = box[0], box[-1]
    rowb = (c1 - c0) * torch_dtype(g.tensors[weight].dtype).itemsize
    st = ring_stage_bytes(r1 - r0, rowb)
    if not st:
        return 0, 0, 0
    m = 1
    for d in g.tensors[op.outputs[0]].shape[:-1]:
        m *= d
    return st, 0 if ring_packed(rowb) else st // WS_STAGE, m * (r1 - r0) * rowb


# The compute warps' side of the ring: every weight byte that lands is multiplied with x once per
# batch row, at stage_gbs an SM, and rows that are not packed (ring_packed) come one 4 KB piece of
# each of 8 rows a stage and are multiplied with x read from shared memory at every stage, which
# costs such a stage stage_us more, whatever the copies in flight. An H200's probes
# (task_probe_mk_*.json, task_probe_inflight4_*.json) timed the rows phase of eight unpacked ops of
# GPT-2 large (batch 2), Qwen3 and SmolLM2 at 0.30 us a stage plus their weight bytes x batch rows at
# ~60 GB/s (GPT-2's q_proj: 4 stages, 3.87 predicted, 3.88 measured; Qwen3's gate/up 3.40 / 3.38;
# GPT-2's c_proj 5.1 / 4.9), unchanged with twice the copies in flight (inflight=4): the consumer,
# not the stream, set them. The 1B decoder's packed rows go at the same 60 GB/s once the ring has
# them in: its o_proj (fused into the residual add) spent 1.05 us in the rows of 16 rows (64 KB,
# 1.09 at 60 GB/s) and 2.19 in 32 (2.18) after waiting 8-9 us for its input
# (task_probe_llama_box_trips.json), where the model without this term had the ring load them
# during the wait and the rows cost nothing: an adversary's coarser o_proj tiles were priced a gain.
def ring_consume_us(plan: Plan, dev: DeviceSpec) -> np.ndarray:
    """Per task, its compute warps' time through its ring stages (0 where it has none)."""
    _, stages, mbytes = _ring_stage_terms(plan)
    return stages * dev.stage_us + mbytes / (dev.stage_gbs * 1e3)


def _task_costs(tg, tasks, positions=None) -> list[tuple[int, float, int, int, int, int, float, float]]:
    """(bytes, flops, ring-fed weight bytes, then _ring_stages_of's three terms summed over its ring-fed
    matmuls: the stage bytes that carry them, unpacked stages, weight bytes x batch rows, then the
    flops and the attended K and V bytes of the decode attention it runs, its own or a fused
    producer's) per task of `tasks` (tasks.per_task); `positions`: the step's pos
    (attended_positions; None: their expectation)."""
    g = tg.graph
    cached = g.__dict__.get("_cost_ops")    # per graph: its ops by name, and which matmuls stream weights
    if cached is None:
        cached = g.__dict__["_cost_ops"] = ({o.name: o for o in g.ops},
                                            {o.name: o.kind == "matmul" and _streams(g, o) for o in g.ops})
    ops, streams = cached
    out = []
    for t in tasks:
        op = ops[t.op]
        obox, _ = task_boxes(tg, t, op)
        own = input_boxes(op, g, obox)
        reads = t.read_boxes or own
        f, exact = _op_flops(op, g, obox, reads)
        w = _nbytes(g, op.inputs[1], own[1][1]) if streams[op.name] else 0
        st, ust, mb = _ring_stages_of(g, op, own[1][1]) if w else (0, 0, 0)
        share = _cache_share(g, op, positions)
        caches = set(op.inputs[1:3]) if op.kind == "decode_attention" else set()
        f *= share
        if caches:
            # an attention reads its heads' whole caches, whatever its fused producers read in their
            # place (a fused cache write reads one row of the cache it writes): the reads of
            # the cache writes fused into it replaced the caches' bytes, so a split measured
            # 6-15% faster than none on an H100 (families_split.json) and predicted 8% slower
            reads = [(n, b) for n, b in reads if n not in caches] + [(n, b) for n, b in own if n in caches]
        extra = 0
        for pname, pbox in t.prologue:
            pop = ops[pname]
            if pop.kind == "decode_attention":
                # a fused producer's whole work is the task's: an attention in the prologue reads its
                # heads' caches (its share of a window) however its cache writes were folded in, once
                # per task that runs it (the IR refuses the fusion; this keeps the price right)
                pshare = _cache_share(g, pop, positions)
                for name, box in input_boxes(pop, g, pbox)[1:3]:
                    if name not in caches:
                        extra += math.ceil(_nbytes(g, name, box) * pshare)
                        reads = [(n, b) for n, b in reads if n != name]
        # the attended K and V bytes of its own caches (reads holds their own boxes, above)
        cache_b = {name: math.ceil(_nbytes(g, name, box) * share) for name, box in own if name in caches}
        if t.parts > 1:
            # a split part reads its share of the cached positions and writes float partials
            # (row, max, sum per head); the last part to finish reads all `parts` of them back to
            # combine, and which part is last is not known ahead, so each is charged for it
            b = sum(-(-cache_b[name] // t.parts) if name in caches else _nbytes(g, name, box) for name, box in reads)
            out_elems = _nbytes(g, op.outputs[0], obox) // torch_dtype(g.tensors[op.outputs[0]].dtype).itemsize
            b += (1 + t.parts) * out_elems * 4
            f /= t.parts
        elif exact is None:
            b = sum(cache_b[name] if name in caches else _nbytes(g, name, box)
                    for name, box in reads) + _nbytes(g, op.outputs[0], obox)
        else:   # the op's own bytes are exact; fused producers still read what they read (their weights)
            b = exact + sum(_nbytes(g, name, box) for name, box in reads if name not in op.inputs)
        b += extra
        af = f if caches else 0.0
        ab = extra + sum(cache_b.values()) / t.parts
        for pname, pbox in t.prologue:
            pop = ops[pname]
            pin = input_boxes(pop, g, pbox)
            pf = _op_flops(pop, g, pbox, pin)[0]
            if pop.kind == "decode_attention":
                pf *= _cache_share(g, pop, positions)
                af += pf
            f += pf
            if streams[pname]:
                w += _nbytes(g, pop.inputs[1], pin[1][1])
                pst, pust, pmb = _ring_stages_of(g, pop, pin[1][1])
                st, ust, mb = st + pst, ust + pust, mb + pmb
        out.append((b, f, w, st, ust, mb, af, ab))
    return out


def wait_groups(plan: Plan, hops: str = "ll") -> tuple[list[tuple[int, ...]], list[list[int]]]:
    """What each task waits for under `hops` (HOPS): (groups, needs), each group a tuple of
    producer tasks that must all have finished, needs[t] the groups task t waits on. "counters":
    the plan's counters and waits; "ll": one group per task, the tasks it depends on (distinct
    dependency sets shared; they depend on the lowering alone, so they are kept on the task
    graph, as its task costs are)."""
    if hops not in HOPS:
        raise ValueError(f"hops {hops!r} is not one of {', '.join(HOPS)}")
    tg = plan.tg
    if hops == "counters":
        cix = {c.id: i for i, c in enumerate(plan.counters)}
        return ([tuple(c.producers) for c in plan.counters],
                [[cix[cid] for cid, _ in plan.waits.get(t, ())] for t in range(len(tg.tasks))])
    cached = tg.__dict__.get("_ll_groups")
    if cached is None:
        n = len(tg.tasks)
        dt, dp = dep_edges(tg)
        order = np.lexsort((dp, dt))          # each task's producers together, ascending
        ps = dp[order].tolist()
        ends = np.searchsorted(dt[order], np.arange(1, n + 1)).tolist()
        index: dict[tuple[int, ...], int] = {}
        groups: list[tuple[int, ...]] = []
        needs: list[list[int]] = []
        at = 0
        for end in ends:
            if end == at:
                needs.append([])
                continue
            key = tuple(ps[at:end])
            at = end
            i = index.get(key)
            if i is None:
                i = index[key] = len(groups)
                groups.append(key)
            needs.append([i])
        cached = tg.__dict__["_ll_groups"] = (groups, needs)
    return cached


def _wait_csr(plan: Plan, hops: str) -> tuple[tuple, tuple, np.ndarray]:
    """What each task waits for, as arrays for simloop: (needs, members-of) CSR pairs and each
    group's size. Under "ll" hops every task with dependencies is a group of its own (the schedule
    is the same as with wait_groups' shared dependency sets: a group's finish is the latest of its
    producers' either way), built from dep_edges at array speed and kept on the task graph."""
    tg = plan.tg
    if hops != "ll":
        groups, needs = wait_groups(plan, hops)
        return (csr(needs), csr(_group_members(tg, groups)),
                np.fromiter(map(len, groups), dtype=np.int64, count=len(groups)))
    cached = tg.__dict__.get("_ll_csr")
    if cached is None:
        n = len(tg.tasks)
        dt, dp = dep_edges(tg)
        count = np.bincount(dt, minlength=n).astype(np.int64)
        has = count > 0
        group_of = np.cumsum(has) - 1                      # a task's group, where it has one
        need_ptr = np.concatenate([[0], np.cumsum(has)]).astype(np.int64)
        need_idx = np.arange(int(has.sum()), dtype=np.int64)   # groups are numbered in task order
        add_ptr = np.concatenate([[0], np.cumsum(np.bincount(dp, minlength=n))]).astype(np.int64)
        # task ids fit in 16 bits (ir.MAX_TASKS), and numpy's stable sort of a 16-bit array is a radix
        # sort: 4M dependencies in ~10 ms where the int64 argsort took ~25-400 ms
        by_producer = np.argsort(dp.astype(np.uint16) if n <= 1 << 16 else dp, kind="stable")
        add_idx = group_of[dt[by_producer]].astype(np.int64)
        cached = tg.__dict__["_ll_csr"] = ((need_ptr, need_idx), (add_ptr, add_idx), count[has])
    return cached


def _queue_csr(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The plan's SM queues as a CSR pair (simloop.csr), read from plan.queues each time (they are a
    plain list its holder may change)."""
    return csr(plan.queues)


def _group_members(tg, groups: list[tuple[int, ...]]) -> list[list[int]]:
    """For every task, the wait groups it is a producer of."""
    adds: list[list[int]] = [[] for _ in range(len(tg.tasks))]
    for i, g in enumerate(groups):
        for p in g:
            adds[p].append(i)
    return adds


# A ring cap on any op (an `inflight` or `ahead` edit) turns on codegen's kernel-wide per-op caps
# (WS_INFLIGHT_OPS: the producer reads each stage's caps from its call's rows word), and an `ahead`
# cap the WS_AHEAD path too (the producer tells the stages of a task still waiting for its inputs
# from those of one whose input is on chip), whatever op the cap is on. Each costs the producer
# time on every stage, and a ring at the compiler's cap of 2 has its next copy wait on the producer:
# every task's stream is that much slower. On an H200 (megakernel_edits_caps_path.json, a cap of 2,
# the compiler's own, on one o_proj, so no stage's cap changes), Qwen3's default ran 1.0% slower
# with the inflight cap and 1.7% with the ahead cap (12.0 and 21.1 us), llama-1b's 0.7% and 1.3%
# (7.0 and 12.3 us). Before codegen waited for each stage once (the per-op path had waited for
# every stage between the cap and the ring's depth, and every task had stored its ring segments
# for the producer) the same caps cost 2.2% and 5.3% on Qwen3, and the experts, which have inflight
# caps, ran 4.0% (Qwen3) and 1.2% (llama-1b) slower. Priced as a fixed cost of every task in such a
# kernel: caps_path_us 0.03 fits both models' inflight cap, ahead_path_us 0.01 more their ahead cap
# beside the cold code of the capped op's own body (an ahead cap on one layer's op gives it a function
# of its own that opens its ring stages: cold_code): +20.8 and +13.9 us predicted against 21.1 and
# 12.3 measured (0.025 before the cold code, which priced both). The H100 takes the H200's (the same
# GH100 SM and kernel).
# ahead_path_us 0.04 since session 51: with the WS_AHEAD path every task's wait phase (its counters'
# polls) ran 0.03 us longer on an H200, in llama-1b's expert and Qwen3's default alike (task_probe_dump_
# llama_ahead_v3.json, task_probe_dump_qwen3_ahead_q2.json); ahead caps at each op's own cap, so that no
# stage's cap changes and no op gets a function of its own, cost Qwen3's default 1.6-2.6% (the caps path
# alone 0.5%) and llama-1b's expert 0.1% (ab_knobs_qwen3_ahead_fn.json, ab_knobs_llama_ahead_fn.json).
# Scored by sim_score over every H200 row: adversary targets 46/48 as before, bisections 2.83 -> 2.74% rms,
# A/B files 1.32 -> 1.25%. What an `ahead` edit on one layer cost llama-1b's expert (1.6-1.8%) was that
# op's function of its own (distinct_ops alone: 1.8%), code layout the sim does not price (Qwen3's default
# lost nothing to one).
def caps_path(plan: Plan) -> bool:
    """Whether the plan's kernel runs per-op ring caps: any op with an `inflight` or `ahead` cap (see above)."""
    return bool(plan.knobs and (plan.knobs.inflight or plan.knobs.ahead))


def ahead_path(plan: Plan) -> bool:
    """Whether the plan's kernel runs the WS_AHEAD path: any op with an `ahead` cap (see caps_path)."""
    return bool(plan.knobs and plan.knobs.ahead)


# Under LL hops (the default kernel) a task that reaches the head of its SM's queue before its inputs
# are there polls the words it reads: its first loads are those polls, so the memory latency of its
# first trip is spent while it waits, and the hop's wait latency is when the polls see the data. A
# task whose SM waited for its inputs takes up to one memory latency of its time into that wait
# (simloop's hide). Charging it again after the hop made each small op of a chain ~2.1 us in the
# sim where an H200 took ~1.2 (SmolLM2's default schedule, task_probe_default_*.json: its layer
# 41.8 us predicted, 32 measured). Under counter hops a task loads its inputs after its counters
# are full: no overlap.
def polled_latency(dev: DeviceSpec, hops: str = "ll") -> float:
    """How much of a task's time its SM's wait for its inputs takes in under `hops` (see above)."""
    return dev.mem_latency_us if hops == "ll" else 0.0


@gc_paused
def predict(plan: Plan, device: str | DeviceSpec = "H200", costs: tuple | None = None,
            hops: str = "ll", positions=None, distinct_ops: str = "") -> Prediction:
    """List-schedule the plan's queues with the device's constants (see the module doc). `hops`:
    how the kernel's tasks learn their inputs are there (wait_groups): "ll", the default
    kernel's, or "counters" (emit_cuda(hops="counters"), thread 0's ring, or a plan with impls).
    `costs`: task_costs' (bytes, flops), or costs_at's with the attention's work; `positions`: the
    step's pos, one per sequence (costs_at), where the default prices the judge's expectation.
    `distinct_ops`: emit_cuda's probe of that name, priced by its code (cold_code)."""
    dev = DEVICES[device] if isinstance(device, str) else device
    tg = plan.tg
    n = len(tg.tasks)
    if positions is not None:
        costs = costs_at(plan, positions)
    if costs is None:
        nbytes, flops = _task_cost_arrays(plan)
    else:
        nbytes, flops = np.asarray(costs[0], dtype=float), np.asarray(costs[1], dtype=float)
    attn = costs[2] if costs is not None and len(costs) > 2 else None
    pf = prefetched(plan)
    queues = _queue_csr(plan)
    own_a, shared_a = _bandwidth_arrays(plan, nbytes, queues)
    trips = _task_trip_array(plan)
    # per task: its streaming rate (bytes per us: one SM's cap, or the chip's shared by its op's SMs),
    # the latencies it pays, its compute time and its fixed costs; its duration follows at its start,
    # once the bytes the ring loaded while its SM waited are known
    spread = np.divide(shared_a, own_a, out=np.ones(n), where=own_a > 0)
    trip0 = trips * dev.mem_latency_us
    onchip_n = _onchip_array(plan)
    onchip = onchip_n * dev.mem_latency_us     # an on-chip norm's weight: a trip before the rows
    # and its reduction over the input, which only starts once the input is in (never in the wait)
    reduce = onchip_n * dev.onchip_norm_us
    lat0 = np.where(pf, dev.prefetch_us, dev.mem_latency_us) + trip0 + onchip + reduce
    # the rows wait for a prologue's trips, an epilogue's for the rows (NORM_KINDS)
    # the rows wait for their input vectors too (input_stagings), which a waiting SM stages as it polls
    x_calls, x_bytes, x_first = _input_arrays(plan, hops)
    staging = x_calls * dev.mem_latency_us + x_bytes / (dev.plain_gbs * 1e3)
    compute0 = compute_us(plan, dev, flops, attn) + trip0 + onchip + reduce + staging
    # (the first call's load goes before the task's polls; a later call's after them)
    first_norm = np.minimum(onchip, dev.mem_latency_us) if hops == "ll" else 0.0
    hide0 = polled_latency(dev, hops) + first_norm
    # a waiting SM stages its first call's input vectors as it polls: the wait takes them in, from the
    # compute path (a later call stages its own after the rows before it)
    chide0 = (np.maximum(hide0, np.where(x_calls > 0, dev.mem_latency_us, 0.0) + x_first / (dev.plain_gbs * 1e3)
                         + first_norm) if hops == "ll" else hide0)
    # the tasks that stage a norm's parameters, and how many each
    sidx, staged = _staged_tasks(plan) if dev.staged_us is not None else (np.zeros(0, np.int64), np.zeros(0))

    def latencies(staged_weight):
        """(trips' time, first bytes' latency, compute, hide, compute's hide) per task, the staged
        parameters of the tasks `sidx` at the chip's busy weight as each starts (`staged_weight`:
        staged_trip_us)."""
        if not len(sidx):
            return trip0, lat0, compute0, hide0, chide0
        per = staged_trip_us(staged_weight, dev)
        extra = np.zeros(n)
        extra[sidx] = staged * (per - dev.mem_latency_us)
        hide, chide = hide0, chide0
        if hops == "ll":     # staged before the polls: while the SM waits for the inputs
            hide, chide = np.full(n, hide0), np.full(n, chide0)
            hide[sidx] += staged * per
            chide[sidx] += staged * per
        return trip0 + extra, lat0 + extra, compute0 + extra, hide, chide

    staged_w = np.ones(len(sidx))
    trip_a, lat_us, compute, hide, chide = latencies(staged_w)
    need_csr, add_csr, gsize = _wait_csr(plan, hops)
    gtail = group_tail(gsize, dev)
    grouped = (dev.busy_group or dev.busy_light != 1.0) and dev.quiet_wait_us is not None
    # (busy_group, busy_light: a hop's busy part as its reader's group waits it)
    gscale = busy_scale(plan, hops, need_csr, gsize, dev) if grouped else None
    fixed = (dev.task_overhead_us + (dev.caps_path_us if caps_path(plan) else 0.0)
             + (dev.ahead_path_us if ahead_path(plan) else 0.0)
             + first_call_us(plan, dev, distinct_ops)
             + light_task_us(plan, dev)
             + dev.counter_us * np.diff(need_csr[0]).astype(float))
    # each group's producers still to finish and their latest finish: a task may start once every
    # group it waits on is complete (full waits only: the validator's rule), at the latest of their
    # last producers' finishes plus the wait latency (simloop.list_schedule, compiled)
    # a task's ring-fed weights stream at its ring's rate (the share of its stages they fill), the ring
    # loading them ahead while the SM waits; the rest of its bytes through its own loads (plain_gbs)
    hop0, fill = hop_us(plan, dev), ring_fill_array(plan)
    hop, weight = hop0, np.ones(0)
    hbusy = None
    if grouped:
        quiet = np.broadcast_to(busy_hops(hop0, 0.0, dev), (n,))
        hop, hbusy = quiet, np.broadcast_to(hop0, (n,)) - quiet
    wb = ring_fed_bytes(plan, nbytes)
    plain = nbytes - wb
    firsts = queues[1][queues[0][:-1][np.diff(queues[0]) > 0]]      # each queue's first task
    if dev.quiet_wait_us is not None:     # what each ring-fed task adds to the chip's busyness (busy_hop_weight)
        streams = tuple(np.where(wb > 0, copies_busy(c), 0.0) for c in own_caps(plan))
    share = ring_share(plan)
    pre_share = ring_share(plan, waiting=True)
    spread = spread * share
    reread = np.zeros(n)
    for round_ in range(SPREAD_ROUNDS + 1):
        alone = stream_rate(spread, dev.sm_gbs * fill, dev.hbm_gbs) * 1e3
        rate, pre_rate = share * alone, pre_share * alone
        plain_us = plain / (stream_rate(spread, dev.plain_gbs, dev.hbm_gbs) * 1e3)
        start, finish, preloaded, busy, left = list_schedule(
            queues, need_csr, add_csr, gsize, wb * (1.0 + reread), rate, wb, trip_a, lat_us + plain_us, compute,
            fixed, hop, FREE_BYTES * fill, RING_BYTES * fill, hide, pre_rate=pre_rate, chide=chide, gtail=gtail,
            hbusy=hbusy, gscale=gscale)
        if left:
            raise ValueError("the plan deadlocks: validate it before predicting")
        if round_ < SPREAD_ROUNDS:     # the SMs that streamed beside each task share the chip's HBM with it
            keep = SPREAD_DAMPING if round_ else 0.0
            # its ring preloads from its SM's previous finish, and streams beside the tasks running then
            # (issue 39: 'ring preloads charged to the HBM budget'; with them free, o_proj in 32 tasks
            # left 100 SMs to preload gate/up at no cost, read 1.0% slower than llama-1b's expert and
            # ran 5.5% slower, in 64 tasks read 1.2% faster and ran 0.1% slower: ab_knobs_s49_probe.json);
            # so do the L2 prefetches issued ahead of their tasks (prefetch_terms)
            prev = np.zeros(n)
            prev[queues[1][1:]] = finish[queues[1][:-1]]
            prev[firsts] = 0.0
            preload_to = prev + np.divide(preloaded, pre_rate, out=np.zeros(n), where=pre_rate > 0)
            also = [(prev, np.minimum(preload_to, start), pre_share)]
            if dev.prefetch_reread or dev.prefetch_stream:
                rr, (p0, p1) = prefetch_terms(plan, queues, prev, start, finish, wb, rate, dev.l2_mb * 1e6)
                reread = keep * reread + (1 - keep) * dev.prefetch_reread * rr
                if dev.prefetch_stream and len(p0):
                    also.append((p0, p1, np.full(len(p0), dev.prefetch_stream)))
            spread = keep * spread + (1 - keep) * streaming_concurrency(
                start, finish, own_a > 0, share, tuple(np.concatenate(x) for x in zip(*also)))
            if dev.quiet_wait_us is not None:
                # (idle_ring: a task's ring copies nothing once its last bytes are in, those it preloaded
                # while its SM waited and the rest streamed at its rate from its start)
                landed = (finish - dev.idle_ring * (finish - np.minimum(finish, start + np.divide(
                    np.maximum(wb - preloaded, 0.0), rate, out=np.zeros(n), where=rate > 0))) if dev.idle_ring else finish)
                if dev.idle_preloaded:      # (idle_preloaded: one whose ring had every byte in before it started)
                    whole = (wb > 0) & (preloaded >= wb * (1 - 1e-9))
                    landed = np.where(whole, landed - dev.idle_preloaded * (landed - start), landed)
                new_w, new_s = busy_hop_weight(start, landed, streams, prev, preload_to, dev,
                                               finish, start[sidx])
                weight = new_w if not round_ else keep * weight + (1 - keep) * new_w
                hop = busy_hops(hop0, weight, dev)
                if grouped:
                    hop, hbusy = quiet, hop - quiet
                if len(sidx):
                    staged_w = new_s if not round_ else keep * staged_w + (1 - keep) * new_s
                    trip_a, lat_us, compute, hide, chide = latencies(staged_w)
    floor = max(float(nbytes.sum()) / (dev.hbm_gbs * 1e3), float(flops.sum()) / (dev.tflops * 1e6))
    latency = (float(finish.max()) if n else 0.0) + dev.launch_us
    return Prediction(dev.name, latency, floor, busy.tolist(), start.tolist(), finish.tolist(), preloaded.tolist(),
                      spread.tolist(), weight.tolist())


__all__ = ["DEVICES", "DATASHEET", "DeviceSpec", "Prediction", "predict", "task_costs", "op_spread", "prefetched", "prefetch_depths", "prefetch_terms",
           "stream_rate", "streaming_concurrency", "SPREAD_ROUNDS", "ring_caps", "hop_us", "hop_scale", "HOP_FLOOR",
           "task_bandwidth_terms", "wait_groups", "required_bytes", "ring_bytes", "RING_BYTES", "FREE_BYTES",
           "ring_stage_bytes", "ring_fill_array", "ring_fed_bytes", "ring_consume_us", "polled_latency",
           "box_loop_trips", "norm_trips", "onchip_norm_loads", "input_stagings", "norm_staged", "task_staged", "staged_trip_us", "caps_path", "ahead_path", "cold_code",
           "cold_code_chars", "first_call_us", "light_tasks", "light_task_us", "SMALL_KINDS",
           "busy_hop_weight", "busy_hop_us", "busy_hops", "group_tail", "spread_z", "busy_scale", "streaming_demand_at",
           "own_caps", "ring_share", "copies_busy", "COPIES_BUSY", "attended_positions", "attention_work", "costs_at",
           "compute_us", "positions_input", "fed_positions"]
