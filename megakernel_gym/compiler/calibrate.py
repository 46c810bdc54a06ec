"""Cost-model calibration: fit the sim backend's device constants to measured megakernels.

    schedules = sample_schedules(graph, 32, seed=0)            # [(label, IR)], all validated
    plans = [(ir.plan(), task_costs(ir.plan())) for _, ir in schedules]
    device, report = fit_device(plans, measured_us, DEVICES["H100"])
    report["after"]["spearman"]                                  # rank agreement, predicted vs measured

What is fitted: FIT_FIELDS (bandwidth of the chip and of one SM, per-task overhead, wait, memory
and launch latencies, the cost of polling a counter and of issuing a prefetch, and how much shorter
a hop is from a ring with fewer copies in flight, capped_wait, where some schedule has an
`inflight` edit to measure it by). tflops
and num_sms stay as the datasheet gives them: a batch-1 decode step is bound by memory and
latency, so its measurements say nothing about the tensor-core rate.

Why not search on predict() directly: one prediction of a 1B-shaped plan takes ~50 ms in Python,
so a derivative-free search of a few hundred steps over 32 plans is many minutes. predict() is a
longest path through the plan (each task starts after its SM's previous task and after its
producers plus the wait latency), so a plan's latency is the largest, over its paths, of a sum
that is cheap to evaluate for any constants. The fit keeps, per plan, the critical paths of
every prediction made so far; Nelder-Mead minimises the error of that model (the max over the
paths, a lower bound that is exact where it was taken), predict() is called again at the
minimiser and its critical paths are added, until the model and predict() agree there. Ten
rounds or so of 32 predictions, where a plain search would need hundreds.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
from scipy.optimize import minimize   # Nelder-Mead: the loss has kinks (a max over paths)
from scipy.stats import spearmanr

from megakernel_gym.compiler.codegen import INFLIGHT, MAX_INFLIGHT
from megakernel_gym.compiler.devices import spec_literal
from megakernel_gym.compiler.costmodel import (DeviceSpec, Prediction, _input_arrays, busy_hops, compute_us, hop_scale,
                                                onchip_norm_loads, polled_latency, predict, prefetched, ring_caps,
                                                ring_fed_bytes, ring_fill_array, ring_share, stream_rate,
                                                task_bandwidth_terms, task_costs, task_trips, wait_groups)
from megakernel_gym.compiler.graph import Graph
from megakernel_gym.compiler.schedule import Knobs, Plan
from megakernel_gym.compiler.tasks import INLINE
from megakernel_gym.compiler.legality import (IR, MAX_TASKS, IRError, facts_of, fusion_problem, inline_problem,
                                              split_problem, task_count, tile_size, wave_tile)

# ---------------------------------------------------------------------------------------
# sampling schedules

# matmul groups of a Llama layer, by op-name suffix (an op matches `x` when it is `x` or ends in `.x`)
MATMUL_GROUPS = {
    "qkv": ("attn.q_proj", "attn.k_proj", "attn.v_proj"),
    "o_proj": ("attn.o_proj",),
    "gate/up": ("mlp.gate_proj", "mlp.up_proj"),
    "down": ("mlp.down_proj",),
    "lm_head": ("lm_head",),
}
# producer -> consumer fusions within one layer's scope (the same sets bench/megakernel_edits.py times)
FUSIONS = {
    "mlp+o_proj": (("gate_proj", "silu_mul"), ("up_proj", "silu_mul"), ("down_proj", "add"), ("o_proj", "add")),
    "ropes": (("k_rope", "k_cache_write"), ("q_rope", "decode_attention")),
    "k/v chain": (("k_proj", "k_rope"), ("v_proj", "v_cache_write")),
}

Change = Callable[["_Ctx", Knobs, dict], None]    # mutates knobs and fused in place


@dataclass
class _Ctx:
    facts: object
    num_sms: int

    def ops(self, pick: Callable[[str, object], bool]) -> list[str]:
        return [n for n in self.facts.ops if pick(n, self.facts.info[n])]


def _suffix(*names: str) -> Callable[[str, object], bool]:
    return lambda n, f: any(n == s or n.endswith("." + s) for s in names)


def _kind(*kinds: str) -> Callable[[str, object], bool]:
    return lambda n, f: f.op.kind in kinds


def _everything(n, f) -> bool:
    return True


def _tiles(pick, factor: float) -> Change:
    """Every picked op's tile becomes the allowed size nearest (in ratio) to factor x its default."""
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        for n in ctx.ops(pick):
            k.tiles[n] = ctx.facts.info[n].nearest_allowed(tile_size(ctx.facts, k, n) * factor)
    return change


def _sms(pick, lo_frac: float, hi_frac: float) -> Change:
    """Picked ops are dealt over the SMs from lo_frac to hi_frac of the chip (at least one SM)."""
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        lo = min(int(ctx.num_sms * lo_frac), ctx.num_sms - 1)
        hi = max(lo, int(ctx.num_sms * hi_frac) - 1)
        for n in ctx.ops(pick):
            k.sms[n] = (lo, hi)
    return change


def _prefetch(pick, depth: int) -> Change:
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        for n in ctx.ops(pick):
            if ctx.facts.info[n].reads_weight:
                k.prefetch[n] = depth
    return change


def _counters(pick, mode: str) -> Change:
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        for n in ctx.ops(pick):
            k.counters[n] = mode
    return change


def _fuse(pairs) -> Change:
    """Each (producer, consumer) pair in every scope that has both, where the IR allows it."""
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        names = set(ctx.facts.ops)
        for n in ctx.facts.ops:
            for prod, cons in pairs:
                if n == prod or n.endswith("." + prod):
                    target = n[: -len(prod)] + cons
                    if target in names and fusion_problem(ctx.facts, fused, n, target) is None:
                        fused[n] = target
    return change


def _reverse_qkv(ctx: _Ctx, k: Knobs, fused: dict) -> None:
    """v, k, q instead of q, k, v in every layer's queue-filling order (they depend only on the
    norm, so any order among them is valid); it moves where each op's round-robin starts."""
    order = list(k.order or ctx.facts.ops)
    pos = {n: i for i, n in enumerate(order)}
    for q in ctx.ops(_suffix("attn.q_proj")):
        trio = [q, q[: -len("q_proj")] + "k_proj", q[: -len("q_proj")] + "v_proj"]
        if all(t in pos for t in trio):
            slots = sorted(pos[t] for t in trio)
            for slot, name in zip(slots, reversed(trio)):
                order[slot] = name
    k.order = order


def _inline_norms(ctx: _Ctx, k: Knobs, fused: dict) -> None:
    """Every rmsnorm computed on chip inside its consumers (the `inline` lever), where the IR allows it."""
    for n in ctx.ops(_kind("rmsnorm")):
        if inline_problem(ctx.facts, fused, n) is None:
            fused[n] = INLINE


def _split_attention(parts: int) -> Change:
    """Every decode attention split over its cached positions (the `split` lever)."""
    def change(ctx: _Ctx, k: Knobs, fused: dict) -> None:
        for n in ctx.ops(_kind("decode_attention")):
            if split_problem(ctx.facts, n, parts) is None:
                k.splits[n] = parts
    return change


def _qkv_wave(ctx: _Ctx, k: Knobs, fused: dict) -> None:
    """q/k/v of each layer at the smallest common tile that gives them one task per SM together."""
    for q in ctx.ops(_suffix("attn.q_proj")):
        trio = [q, q[: -len("q_proj")] + "k_proj", q[: -len("q_proj")] + "v_proj"]
        if not all(t in ctx.facts.info for t in trio):
            continue
        size = wave_tile(ctx.facts, trio, ctx.num_sms)
        if size:
            for t in trio:
                k.tiles[t] = size


def _split_matmuls(ctx: _Ctx, k: Knobs, fused: dict) -> None:
    _sms(_kind("matmul"), 0, 1 / 2)(ctx, k, fused)
    _sms(lambda n, f: f.op.kind != "matmul", 1 / 2, 1)(ctx, k, fused)


# One change per entry, (axis, label, change). The list is interleaved by axis so that the first
# few schedules already cover every kind of knob; seeded combinations of them come after.
SINGLES: list[tuple[str, str, Change]] = [
    ("sms", "all ops on 1/16 of the SMs", _sms(_everything, 0, 1 / 16)),
    ("tiles", "matmul tiles x2", _tiles(_kind("matmul"), 2)),
    ("prefetch", "prefetch 2 on matmuls", _prefetch(_kind("matmul"), 2)),
    ("fuse", "fuse mlp+o_proj", _fuse(FUSIONS["mlp+o_proj"])),
    ("counters", "op counters everywhere", _counters(_everything, "op")),
    # the expert's levers (policies/expert.py), alone and, through the seeded combinations, with the rest
    ("inline", "inline norms", _inline_norms),
    ("split", "split attention n=8", _split_attention(8)),
    ("wave", "q/k/v in one wave", _qkv_wave),
    ("sms", "all ops on half the SMs", _sms(_everything, 0, 1 / 2)),
    ("tiles", "matmul tiles x1/2", _tiles(_kind("matmul"), 1 / 2)),
    ("prefetch", "prefetch 4 on matmuls", _prefetch(_kind("matmul"), 4)),
    ("fuse", "fuse ropes", _fuse(FUSIONS["ropes"])),
    ("counters", "op counters on matmuls", _counters(_kind("matmul"), "op")),
    ("sms", "all ops on 1/4 of the SMs", _sms(_everything, 0, 1 / 4)),
    ("tiles", "qkv tiles x2", _tiles(_suffix(*MATMUL_GROUPS["qkv"]), 2)),
    ("prefetch", "prefetch 1 on matmuls", _prefetch(_kind("matmul"), 1)),
    ("fuse", "fuse k/v chain", _fuse(FUSIONS["k/v chain"])),
    ("counters", "op counters on elementwise", _counters(_kind("elementwise"), "op")),
    ("sms", "non-matmul ops on 1/16 of the SMs", _sms(lambda n, f: f.op.kind != "matmul", 0, 1 / 16)),
    ("tiles", "gate/up tiles x4", _tiles(_suffix(*MATMUL_GROUPS["gate/up"]), 4)),
    ("prefetch", "prefetch 3 on matmuls", _prefetch(_kind("matmul"), 3)),
    ("fuse", "fuse all three", _fuse(FUSIONS["mlp+o_proj"] + FUSIONS["ropes"] + FUSIONS["k/v chain"])),
    ("order", "order v,k,q", _reverse_qkv),
    ("sms", "matmuls on one half, the rest on the other", _split_matmuls),
    ("tiles", "down tiles x1/2", _tiles(_suffix(*MATMUL_GROUPS["down"]), 1 / 2)),
    ("tiles", "lm_head tiles x1/4", _tiles(_suffix(*MATMUL_GROUPS["lm_head"]), 1 / 4)),
    ("tiles", "o_proj tiles x4", _tiles(_suffix(*MATMUL_GROUPS["o_proj"]), 4)),
    ("tiles", "attention tiles x4", _tiles(_kind("decode_attention"), 4)),
    ("tiles", "elementwise tiles x8", _tiles(_kind("elementwise"), 8)),
    ("tiles", "matmul tiles x4", _tiles(_kind("matmul"), 4)),
    ("prefetch", "prefetch 2 on every weight reader", _prefetch(_everything, 2)),
    ("split", "split attention n=4", _split_attention(4)),
    ("inline", "inline norms + fuse all three", lambda c, k, f: (_fuse(FUSIONS["mlp+o_proj"] + FUSIONS["ropes"])(c, k, f),
                                                              _inline_norms(c, k, f))),
]


def _key(ir: IR) -> tuple:
    k = ir.knobs
    return (k.num_sms, tuple(sorted(k.tiles.items())), tuple(sorted(k.sms.items())), tuple(k.order),
            tuple(sorted(k.counters.items())), tuple(sorted(k.prefetch.items())), tuple(sorted(ir.fused.items())),
            tuple(sorted(k.splits.items())))


def _build(graph: Graph, ctx: _Ctx, changes: list[Change]) -> IR | None:
    """The IR with the changes applied in turn, or None where the IR (or the plan's validator)
    refuses it or it has more than MAX_TASKS tasks."""
    k = Knobs(num_sms=ctx.num_sms)
    fused: dict[str, str] = {}
    for change in changes:
        change(ctx, k, fused)
    if task_count(ctx.facts, k) > MAX_TASKS:
        return None
    try:
        return IR(graph, k, fused, num_sms=ctx.num_sms)
    except IRError:
        return None


def sample_schedules(graph: Graph, n: int, seed: int = 0, num_sms: int = 132) -> list[tuple[str, IR]]:
    """n distinct schedules of `graph`, each (label, IR), every one accepted by the IR's knob rules.

    The default schedule first, then one change at a time (SINGLES: tile sizes, SM ranges,
    prefetch depths, counter granularity, fusions, op order; each applied to every layer alike),
    then seeded combinations of two or three changes from different axes, until there are n.
    The spread runs from clearly bad (everything on a sixteenth of the chip, small tiles) to the
    fused, prefetched schedules that are the fastest the compiler knows. Plans are built lazily
    (ir.plan()): validation of each is the caller's cost, and on a 1B graph it is seconds.
    """
    ctx = _Ctx(facts_of(graph), num_sms)
    rng = random.Random(seed)
    out: list[tuple[str, IR]] = []
    seen: set[tuple] = set()

    def add(label: str, changes: list[Change]) -> None:
        ir = _build(graph, ctx, changes)
        if ir is not None and _key(ir) not in seen:
            seen.add(_key(ir))
            out.append((label, ir))

    add("default", [])
    for _, label, change in SINGLES:
        if len(out) >= n:
            break
        add(label, [change])
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        picked: dict[str, tuple[str, Change]] = {}
        for axis, label, change in rng.sample(SINGLES, min(len(SINGLES), rng.choice((2, 3, 4)))):
            picked.setdefault(axis, (label, change))
        if len(picked) < 2:
            continue
        items = sorted(picked.values(), key=lambda lc: [s[1] for s in SINGLES].index(lc[0]))
        add(" + ".join(label for label, _ in items), [c for _, c in items])
    if len(out) < n:
        raise ValueError(f"only {len(out)} distinct valid schedules of {graph.name} found for n={n}; "
                         "ask for fewer or use a larger graph")
    return out


# ---------------------------------------------------------------------------------------
# agreement measures


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (ties averaged; scipy.stats); nan when either side is constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman: {len(xs)} values against {len(ys)}")
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return float("nan")
    return float(spearmanr(list(xs), list(ys)).statistic)


def agreement(predicted, measured) -> dict:
    """Spearman, median and max absolute % error, and mean squared log error of predicted vs measured."""
    rel = [abs(p - m) / m for p, m in zip(predicted, measured)]
    logs = [math.log(p / m) ** 2 for p, m in zip(predicted, measured)]
    return {"spearman": spearman(predicted, measured), "median_abs_pct_err": 100 * float(np.median(rel)),
            "max_abs_pct_err": 100 * max(rel), "msle": sum(logs) / len(logs)}


# ---------------------------------------------------------------------------------------
# fitting

FIT_FIELDS = ("hbm_gbs", "task_overhead_us", "wait_latency_us", "mem_latency_us", "launch_us", "sm_gbs",
              "counter_us", "prefetch_us", "capped_wait", "plain_gbs", "quiet_wait_us")
# sane ranges: a tenth of a GPU's bandwidth to several times a B200's; latencies from 1 ns to 100 us
FIT_BOUNDS = {"hbm_gbs": (100.0, 20000.0), "task_overhead_us": (0.01, 100.0), "wait_latency_us": (0.01, 100.0),
              "mem_latency_us": (0.001, 100.0), "launch_us": (0.1, 20.0), "sm_gbs": (1.0, 1000.0),
              "plain_gbs": (1.0, 1000.0), "quiet_wait_us": (0.01, 100.0),
              "counter_us": (0.001, 10.0), "prefetch_us": (0.001, 100.0),
              # a share of the wait latency per copy in flight (costmodel.hop_us); its least is where a
              # search in log space starts when the base has none
              "capped_wait": (0.001, 0.95)}


@dataclass
class _PlanTerms:
    """What a plan's critical paths need, computed once: per task its bytes (alone, and times
    its op's SM spread: costmodel.task_bandwidth_terms), its compute time (at the fixed tensor-core
    rate, or its compute warps' time through its ring stages, costmodel.ring_consume_us, at
    the base's constants: neither is fitted), whether it pays the memory latency (no prefetch), its further round trips
    (costmodel.task_trips, and an on-chip norm's weight: costmodel.onchip_norm_loads), how many of them its
    SM's wait for its inputs may take in (the first, and an on-chip norm's), how many counters it
    polls, its SM predecessor, the producers it waits for, the copies in flight its ring allows
    as it signals (costmodel.ring_caps: what its readers' hop from it costs) and the share of its
    ring stages its weight rows fill (costmodel.ring_fill_array: that share of sm_gbs) and its ring-fed
    weight bytes (the rest of its bytes stream at plain_gbs), and the input vectors its matmul calls
    stage before their rows (costmodel.input_stagings: calls, each a memory latency, and bytes at plain_gbs)."""
    nbytes: np.ndarray
    shared_bytes: np.ndarray
    compute_us: np.ndarray
    pays_latency: np.ndarray
    trips: np.ndarray
    hides: np.ndarray
    counters: np.ndarray
    prev: list[int]
    needs: list[list[int]]
    caps: np.ndarray
    fill: np.ndarray
    ring: np.ndarray
    share: np.ndarray
    x_calls: np.ndarray
    x_bytes: np.ndarray


def _terms(plan: Plan, costs, dev: DeviceSpec, hops: str = "ll") -> _PlanTerms:
    nbytes, flops = costs[0], costs[1]
    n = len(plan.tg.tasks)
    pays = np.array([0.0 if p else 1.0 for p in prefetched(plan)])
    onchip = np.array(onchip_norm_loads(plan), dtype=float)
    trips = np.array(task_trips(plan), dtype=float) + onchip
    prev = [-1] * n
    for q in plan.queues:
        for a, b in zip(q, q[1:]):
            prev[b] = a
    groups, waits = wait_groups(plan, hops)
    needs = [[p for g in waits[t] for p in groups[g]] for t in range(n)]
    own, shared = task_bandwidth_terms(plan, nbytes)
    polls = np.array([len(w) for w in waits], dtype=float)
    compute = compute_us(plan, dev, flops, costs[2] if len(costs) > 2 else None)
    x_calls, x_bytes, _ = _input_arrays(plan, hops)
    return _PlanTerms(np.asarray(own), np.asarray(shared), compute, pays, trips, 1.0 + np.minimum(onchip, 1.0), polls,
                      prev, needs, ring_caps(plan).astype(np.int64), np.asarray(ring_fill_array(plan), dtype=float),
                      ring_fed_bytes(plan, own), ring_share(plan), x_calls, x_bytes)


def _critical_path(terms: _PlanTerms, pred: Prediction, hop, hide: float = 0.0) -> tuple[tuple[int, ...], np.ndarray, float]:
    """The tasks of the path that set the predicted latency (walked back from the last finish
    through whichever of SM predecessor or producer + its hop set each start; `hop`: costmodel.hop_us,
    per task or one number), its waits: how many of its steps were a hop from a producer whose
    ring allowed c copies in flight, at index c, each weighed by how busy the chip was as the
    producer signalled (Prediction.hop_busy: costmodel.busy_hop_weight), and again at MAX_INFLIGHT
    + 1 + c by how quiet (1 - that); and how many memory latencies its tasks' waits took
    in (`hide`: costmodel.polled_latency; a task whose SM idled g before it started takes in
    min(g, hide times its terms.hides), counted here in memory latencies)."""
    finish, start = pred.finish_us, pred.start_us
    hops = np.broadcast_to(np.asarray(hop, dtype=float), (len(finish),))
    t = max(range(len(finish)), key=finish.__getitem__)
    path, waits = [t], np.zeros(2 * (MAX_INFLIGHT + 1))
    busy = np.asarray(pred.hop_busy, dtype=float) if len(pred.hop_busy) else np.ones(len(finish))
    hidden = 0.0

    def took_in(t: int) -> float:
        idle = start[t] - (finish[terms.prev[t]] if terms.prev[t] >= 0 else 0.0)
        return min(max(idle, 0.0), hide * terms.hides[t]) / hide if hide > 0 else 0.0

    hidden += took_in(t)
    while True:
        best, via, waited = -math.inf, -1, False
        if terms.prev[t] >= 0:
            best, via = finish[terms.prev[t]], terms.prev[t]
        for p in terms.needs[t]:
            if finish[p] + hops[p] > best:
                best, via, waited = finish[p] + hops[p], p, True
        if via < 0:
            break
        if waited:
            c = min(int(terms.caps[via]), MAX_INFLIGHT)
            waits[c] += busy[via]
            waits[MAX_INFLIGHT + 1 + c] += 1.0 - busy[via]
        t = via
        path.append(t)
        hidden += took_in(t)
    return tuple(path), waits, hidden


class _PathModel:
    """Per plan, the latency of each critical path collected so far as a function of the fitted
    constants; a plan's modelled latency is the largest of them (see the module doc)."""

    def __init__(self, num_sms: int):
        self.num_sms = num_sms
        self.paths: list[list[tuple]] = []
        self.seen: list[set] = []
        self._flat = None      # every path's terms end to end (latency() is called thousands of times a fit)

    def add(self, i: int, terms: _PlanTerms, path: tuple[int, ...], waits: np.ndarray, hidden: float = 0.0,
            preloaded=None, spread=None) -> bool:
        """Add plan i's critical path (`path`, `waits`, `hidden`: _critical_path's); `preloaded`: per task the weight bytes the ring had in when it
        started (Prediction.preloaded, from the prediction the path came from), which it does not
        stream itself; `spread`: per task the SMs it shared HBM with in that prediction
        (Prediction.spread; else its op's spread, terms.shared_bytes)."""
        while len(self.paths) <= i:
            self.paths.append([])
            self.seen.append(set())
        idx = np.asarray(path)
        got = np.zeros(len(path)) if preloaded is None else np.asarray(preloaded, dtype=float)[idx]
        shared = (terms.shared_bytes[idx] if spread is None or not len(spread)
                  else terms.nbytes[idx] * np.asarray(spread, dtype=float)[idx])
        key = (path, tuple(np.round(got / 1024).astype(int)), tuple(np.round(shared / terms.nbytes[idx].clip(1))
                                                                     .astype(int)), round(hidden, 2),
               tuple(np.round(waits, 2)))
        if key in self.seen[i]:
            return False
        self.seen[i].add(key)
        own, ring = terms.nbytes[idx], terms.ring[idx]
        spread = np.divide(shared, own, out=np.ones(len(own)), where=own > 0)
        # the ring-fed bytes still to stream past what the ring had in, and the task's own loads
        self.paths[i].append((np.maximum(ring - got, 0.0), own - ring, spread, terms.compute_us[idx],
                              terms.pays_latency[idx], terms.trips[idx], float(terms.counters[idx].sum()), len(path),
                              waits, terms.fill[idx], hidden, terms.share[idx], terms.x_calls[idx], terms.x_bytes[idx]))
        self._flat = None
        return True

    def _flatten(self):
        """Per task of every path: ring bytes left, own loads' bytes, spread, compute, memory latencies
        (the first and each round trip), round trips alone (serial with the compute too), prefetches,
        ring fill; per path: where it starts, its plan, polls, task count, waits (one
        row per path) and the memory latencies its waits took in; per task again: its ring share and the
        input vectors it stages (calls, bytes)."""
        rows = [(i, p) for i, paths in enumerate(self.paths) for p in paths if p[7] > 0]
        if not rows:
            return None
        cat = lambda k: np.concatenate([p[k] for _, p in rows]).astype(float)  # noqa: E731
        pays, trips = cat(4), cat(5)
        starts = np.cumsum([0] + [p[7] for _, p in rows[:-1]])
        return (cat(0), cat(1), cat(2), cat(3), pays + trips, trips, 1 - pays, cat(9), starts, np.array([i for i, _ in rows]),
                np.array([p[6] for _, p in rows]), np.array([p[7] for _, p in rows], dtype=float),
                np.vstack([p[8] for _, p in rows]).astype(float), np.array([p[10] for _, p in rows], dtype=float),
                cat(11), cat(12), cat(13))

    def latency(self, v: dict) -> np.ndarray:
        """Each plan's modelled latency at constants `v`: its slowest path, plus the launch."""
        best = np.zeros(len(self.paths))
        if self._flat is None:
            self._flat = self._flatten()
        if self._flat is not None:
            (ring, plain, spread, compute, latencies, trips, prefetches, fill, starts, plan, polls, count, waits,
             hidden, share, x_calls, x_bytes) = self._flat
            scale = hop_scale(_CAPS, v["capped_wait"])      # busy hops, then quiet ones (_critical_path)
            quiet = v["quiet_wait_us"] if v.get("quiet_wait_us") is not None else v["wait_latency_us"]
            hop = np.concatenate([v["wait_latency_us"] * scale, quiet * scale])
            mem = (ring / (share * stream_rate(spread, v["sm_gbs"] * fill, v["hbm_gbs"]) * 1e3)
                   + plain / (stream_rate(spread, v["plain_gbs"], v["hbm_gbs"]) * 1e3) + latencies * v["mem_latency_us"]
                   + prefetches * v["prefetch_us"])
            serial = compute + (trips + x_calls) * v["mem_latency_us"] + x_bytes / (v["plain_gbs"] * 1e3)
            total = (np.add.reduceat(np.maximum(mem, serial), starts)
                     + count * v["task_overhead_us"] + waits @ hop
                     + polls * v["counter_us"] - hidden * v["mem_latency_us"])
            np.maximum.at(best, plan, total)
        return best + v["launch_us"]


_CAPS = np.arange(MAX_INFLIGHT + 1, dtype=float)   # copies in flight, by index of a path's waits


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, iters: int = 400,
                tol: float = 1e-10) -> np.ndarray:
    """Minimise f from x0 with scipy's Nelder-Mead, its first simplex `step` wide along each axis."""
    x0 = np.asarray(x0, dtype=float)
    simplex = np.vstack([x0] + [x0 + step * np.eye(len(x0))[i] for i in range(len(x0))])
    res = minimize(f, x0, method="Nelder-Mead",
                   options={"initial_simplex": simplex, "maxiter": iters, "xatol": 1e-6, "fatol": tol})
    return res.x


def _values(x: np.ndarray, fields: tuple[str, ...] = FIT_FIELDS, base: DeviceSpec | None = None) -> dict:
    """Every FIT_FIELDS constant: those in `fields` from x (log space, within FIT_BOUNDS), the rest base's."""
    v = {k: getattr(base, k) for k in FIT_FIELDS if k not in fields} if base is not None else {}
    v.update({name: min(max(math.exp(x_), FIT_BOUNDS[name][0]), FIT_BOUNDS[name][1]) for name, x_ in zip(fields, x)})
    return v


def _spec(base: DeviceSpec, v: dict, name: str | None = None) -> DeviceSpec:
    return replace(base, name=name or base.name, **{k: float(v[k]) if v[k] is not None else None for k in FIT_FIELDS})


def fit_device(plans_costs: list[tuple[Plan, tuple]], measured_us: list[float], base: DeviceSpec, *,
               prior: float = 1e-4, rounds: int = 12, starts: int = 24, seed: int = 0,
               name: str | None = None, hops: str = "ll",
               fields: tuple[str, ...] = FIT_FIELDS) -> tuple[DeviceSpec, dict]:
    """Fit `fields` (FIT_FIELDS, or some of them; the rest stay base's) of `base` so predict() matches
    the measured latencies of the plans.

    plans_costs: [(plan, task_costs(plan))], measured_us: one latency per plan. The loss is the
    mean squared log error (a schedule 10x slower weighs as much as one 10x faster) plus `prior`
    times the squared log distance of each constant from `base`'s, which keeps a constant the
    measurements cannot pin down (say, the memory latency when every schedule prefetches) where
    the datasheet put it. Search is Nelder-Mead in log space over the critical-path model, with
    predict() re-run at each round's optimum (see the module doc); the first round also starts
    from `starts` random constants (seeded by `seed`) within 10x of base's. The constants returned
    are the best that predict() itself scored, with the kernel's `hops` (costmodel.wait_groups).
    base's staged_us (a norm's staged loads on a busy chip), caps_path_us, ahead_path_us, cold_code_us,
    cold_code_kchar_us, small_task_us, norm_task_us, fused_norm_us, onchip_norm_us, norm_row_us, idle_ring,
    idle_preloaded, group_tail_us, busy_group and busy_light are kept, not fitted, and the critical-path model takes those
    loads at the memory latency and no caps paths, cold code, light ops' own time or wait groups' tails (and of a waiting task's input stagings, costmodel.input_stagings, only the polled latency
    taken into its wait): with them set,
    only predict() at each round's optimum sees them (fit from a base without them for the
    surrogate's exact terms).

    Returns (the fitted DeviceSpec, a report: the constants before and after, agreement() before
    and after, and predictions per plan before and after).
    """
    if len(plans_costs) != len(measured_us) or not plans_costs:
        raise ValueError(f"fit_device: {len(plans_costs)} plans against {len(measured_us)} measurements")
    if any(not (m > 0) for m in measured_us):
        raise ValueError("fit_device: every measured latency must be a positive number of us")
    log_meas = np.log(np.asarray(measured_us, dtype=float))
    terms = [_terms(plan, costs, base, hops) for plan, costs in plans_costs]
    # capped_wait is measured only by schedules whose rings keep other than INFLIGHT copies in flight
    # (the `inflight` edit); without one it keeps base's value
    bad = set(fields) - set(FIT_FIELDS)
    if bad:
        raise ValueError(f"fit_device: {sorted(bad)} are not among the fitted constants {FIT_FIELDS}")
    fields = tuple(k for k in FIT_FIELDS if k in fields
                   and (k != "capped_wait" or any(bool(np.any(tm.caps != INFLIGHT)) for tm in terms))
                   and (k != "quiet_wait_us" or base.quiet_wait_us is not None))
    x0 = np.array([math.log(max(getattr(base, k), FIT_BOUNDS[k][0])) for k in fields])
    # the prior holds a constant near base's value; one base has none of (capped_wait 0) is free
    known = np.array([1.0 if getattr(base, k) >= FIT_BOUNDS[k][0] else 0.0 for k in fields])
    model = _PathModel(base.num_sms)

    def loss(pred: np.ndarray, x: np.ndarray) -> float:
        return float(np.mean((np.log(pred) - log_meas) ** 2) + prior * np.sum(known * (x - x0) ** 2))

    def evaluate(x: np.ndarray) -> tuple[float, list[float], int]:
        """predict() every plan at x; add their critical paths to the model."""
        dev = _spec(base, _values(x, fields, base))
        preds, added = [], 0
        for i, ((plan, costs), tm) in enumerate(zip(plans_costs, terms)):
            p = predict(plan, dev, costs=costs, hops=hops)
            preds.append(p.latency_us)
            hop = dev.wait_latency_us * hop_scale(tm.caps, dev.capped_wait)   # costmodel.hop_us, from the caps the terms hold
            if len(p.hop_busy):                                                # and how busy the chip was at each
                hop = busy_hops(hop, p.hop_busy, dev)
            added += model.add(i, tm, *_critical_path(tm, p, hop, polled_latency(dev, hops)), p.preloaded, p.spread)
        return loss(np.asarray(preds), x), preds, added

    def model_loss(x: np.ndarray) -> float:
        lo = np.array([math.log(FIT_BOUNDS[k][0]) for k in fields])
        hi = np.array([math.log(FIT_BOUNDS[k][1]) for k in fields])
        xc = np.clip(x, lo, hi)
        return loss(model.latency(_values(xc, fields, base)), xc) + float(np.sum((x - xc) ** 2))   # steer back inside

    x_best = x0
    best, before, _ = evaluate(x0)
    best_preds = before
    history = [{"round": 0, "loss": best}]
    rng = np.random.default_rng(seed)
    for r in range(1, rounds + 1):
        # the loss has more than one basin (a constant that barely moves any path can drift), and
        # the path model is cheap: the first round also starts from constants up to 10x either way
        origins = [x_best] + ([x0 + rng.uniform(-math.log(10), math.log(10), len(x0)) for _ in range(starts)]
                              if r == 1 else [])
        found = []
        for x in origins:
            for step in (1.0, 0.3, 0.1):      # restarts: Nelder-Mead stalls on the kinks of the max
                x = nelder_mead(model_loss, x, step=step)
            found.append((model_loss(x), x))
        x = min(found, key=lambda fx: fx[0])[1]
        x = np.log(np.array([_values(x, fields, base)[k] for k in fields]))
        modelled = model_loss(x)
        true, preds, added = evaluate(x)
        history.append({"round": r, "loss": true, "model_loss": modelled, "paths_added": added})
        if true < best:
            x_best, best, best_preds = x, true, preds
        if added == 0 or abs(true - modelled) <= 1e-9 + 1e-6 * abs(true):
            break       # predict() agrees with the model at its optimum: nothing left to learn
    fitted = _spec(base, _values(x_best, fields, base), name)
    report = {
        "fitted": {k: getattr(fitted, k) for k in FIT_FIELDS if getattr(fitted, k) is not None},
        "base": {k: getattr(base, k) for k in FIT_FIELDS if getattr(base, k) is not None},
        "before": agreement(before, measured_us),
        "after": agreement(best_preds, measured_us),
        "predicted_before_us": before,
        "predicted_after_us": best_preds,
        "loss_before": history[0]["loss"],
        "loss_after": best,
        "rounds": history,
    }
    return fitted, report


def plans_and_costs(schedules: list[tuple[str, IR]]) -> list[tuple[Plan, tuple]]:
    """(plan, task_costs) per schedule: built once, since both take seconds on a 1B graph."""
    out = []
    for _, ir in schedules:
        plan = ir.plan()
        out.append((plan, task_costs(plan)))
    return out


__all__ = ["sample_schedules", "spearman", "agreement", "fit_device", "spec_literal", "plans_and_costs",
           "nelder_mead", "FIT_FIELDS", "FIT_BOUNDS", "SINGLES", "MATMUL_GROUPS", "FUSIONS"]
