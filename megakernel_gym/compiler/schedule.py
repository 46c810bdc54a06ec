"""The schedule: the knobs an agent edits, and the per-SM plan they build.

`Knobs` are op-level and small (what the IR text shows and the edit language changes):
tile sizes, the SM range each op's tasks run on, the op order used to fill the queues,
counter granularity per op, prefetch depth. `build_plan` turns knobs + task graph into a
`Plan`: one ordered task queue per SM, monotonic counters that producers increment, and
the waits (counter, static threshold) each task performs before it starts. The plan is
what the validator proves safe and what the VM and the megakernel execute.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from megakernel_gym.compiler.graph import Graph
from megakernel_gym.compiler.pause_gc import gc_paused
from megakernel_gym.compiler.tasks import TaskGraph, dep_edges, kept, lower_cached, per_task, sorted_unique

COUNTER_MODES = ("tile", "op")


@dataclass
class Knobs:
    num_sms: int = 132
    tiles: dict[str, int] = field(default_factory=dict)              # op -> tile size
    sms: dict[str, tuple[int, int]] = field(default_factory=dict)     # op -> (first, last) SM, inclusive
    order: list[str] = field(default_factory=list)                   # op order for queue filling
    counters: dict[str, str] = field(default_factory=dict)           # op -> "tile" | "op"
    prefetch: dict[str, int] = field(default_factory=dict)           # op -> weight tiles loaded ahead
    fused: dict[str, str] = field(default_factory=dict)              # producer op -> consumer it runs in
    splits: dict[str, int] = field(default_factory=dict)             # attention op -> parts its positions split into
    inflight: dict[str, int] = field(default_factory=dict)           # matmul -> weight-ring copies in flight (codegen)
    ahead: dict[str, int] = field(default_factory=dict)              # matmul -> the same while its task waits (codegen)

    def copy(self) -> "Knobs":
        return Knobs(self.num_sms, dict(self.tiles), dict(self.sms), list(self.order), dict(self.counters),
                     dict(self.prefetch), dict(self.fused), dict(self.splits), dict(self.inflight),
                     dict(self.ahead))


@dataclass
class Counter:
    id: int
    name: str
    producers: list[int]     # tasks that add 1 when they finish


@dataclass
class Plan:
    tg: TaskGraph
    num_sms: int
    queues: list[list[int]]                        # per SM: task ids in execution order
    counters: list[Counter] | None                 # (see _from_arrays)
    waits: dict[int, list[tuple[int, int]]] | None  # task -> [(counter id, threshold)] (see _get_waits)
    knobs: Knobs | None = None
    # build_plan's waits as arrays (each wait's task, counter position and threshold, by task);
    # `waits` is built from them the first time someone asks for it
    wait_arrays: tuple | None = field(default=None, repr=False, compare=False)
    # build_plan's counters as (names, producer counts, producers in counter order); `counters`
    # is built from them the first time someone asks for it
    counter_arrays: tuple | None = field(default=None, repr=False, compare=False)

    def sm_of(self) -> dict[int, int]:
        return {t: s for s, q in enumerate(self.queues) for t in q}

    def counter_of_task(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for c in self.counters:
            for p in c.producers:
                out.setdefault(p, []).append(c.id)
        return out


def _from_arrays(attr: str, build, doc: str) -> property:
    """A Plan attribute that build_plan leaves as arrays and `build(plan)` makes into the Python value
    on first use. Whoever has that value may change it, so from then on the arrays no longer speak
    for the plan ("_<attr>_given": trusted_waits, trusted_counters); a value set counts the same."""
    def get(plan: Plan):
        value = plan.__dict__.get("_" + attr)
        if value is None:
            value = build(plan)
            if value is not None:
                plan.__dict__["_" + attr] = value
        plan.__dict__[f"_{attr}_given"] = True
        return value

    def put(plan: Plan, value) -> None:
        plan.__dict__["_" + attr] = value
        plan.__dict__[f"_{attr}_given"] = value is not None
    return property(get, put, doc=doc)


def _waits_of(plan: Plan):
    if plan.wait_arrays is None:
        return None
    wt, wc, thr = plan.wait_arrays
    w = {t: [] for t in range(len(plan.tg.tasks))}
    for t, c, h in zip(wt.tolist(), wc.tolist(), thr.tolist()):
        w[t].append((c, h))
    return w


def _counters_of(plan: Plan):
    if plan.counter_arrays is None:
        return None
    names, lens, prods = plan.counter_arrays
    flat = prods.tolist()
    out, at = [], 0
    for i, (name, end) in enumerate(zip(names, np.cumsum(lens).tolist())):
        out.append(Counter(i, name, flat[at:end]))
        at = end
    return out


Plan.waits = _from_arrays("waits", _waits_of, "task -> [(counter id, threshold)], from build_plan's arrays on "
                          "first use")   # type: ignore[assignment]
# a 1B decoder has 20k tile counters, which the sim's validator and cost model read as arrays, so most
# plans never build the list
Plan.counters = _from_arrays("counters", _counters_of, "the plan's counters, from build_plan's arrays on first "
                             "use")   # type: ignore[assignment]


def trusted_counters(plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
    """The plan's counters as (producer counts, producers in counter order) arrays when they are
    build_plan's own and plan.counters has never been handed out (nor set); else None."""
    if plan.counter_arrays is None or plan.__dict__.get("_counters_given"):
        return None
    return plan.counter_arrays[1], plan.counter_arrays[2]


def counter_count(plan: Plan) -> int:
    """len(plan.counters), without building the list where build_plan's arrays say it."""
    trusted = trusted_counters(plan)
    return len(trusted[0]) if trusted is not None else len(plan.counters)


def trusted_waits(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The plan's waits as (task, counter position, threshold) arrays when they are build_plan's own
    and plan.waits has never been handed out (nor set), so nothing can have changed them; else None."""
    if plan.wait_arrays is None or plan.__dict__.get("_waits_given"):
        return None
    return plan.wait_arrays


def default_knobs(g: Graph, num_sms: int = 132) -> Knobs:
    return Knobs(num_sms=num_sms, order=[o.name for o in g.ops if o.kind != "view"])


def fill_sequence(tg: TaskGraph, order) -> np.ndarray:
    """Every op's tasks in the op order, each op's in tile order: the order build_plan fills the
    queues in, and its counters' producers in counter order (read-only; the last few kept on the
    task graph). An op of the order the task graph lacks raises KeyError."""
    key = tuple(order)

    def build():
        seq = np.fromiter(chain.from_iterable(tg.by_op[op] for op in key), dtype=np.int64)
        seq.flags.writeable = False
        return seq
    return kept(tg, "_fill_sequences", key, build)


def _counters_and_waits(tg: TaskGraph, order: list[str], modes: dict[str, str]) -> tuple[list, tuple]:
    """The counters in op order, one per tile or one per op as `modes` says, as (names, producer
    counts, producers in counter order), and every task's waits as (task, counter, threshold) arrays: each task waits on the counters of
    the tasks it depends on, each once, in counter order, in full. They depend on the lowering,
    the op order and the counter modes alone, so the last few are kept on the task graph (an
    edit of SM ranges or prefetch depths builds none again). The arrays are shared and read-only
    (Plan.waits and Plan.counters are built from them as new objects)."""
    key = (tuple(order), tuple(sorted((op, m) for op, m in modes.items() if m == "op" and op in tg.by_op)))
    return kept(tg, "_counter_cache", key, lambda: _build_counters_and_waits(tg, order, modes))


def _build_counters_and_waits(tg: TaskGraph, order: list[str], modes: dict[str, str]) -> tuple[tuple, tuple]:
    names = tg.__dict__.get("_task_names")
    if names is None:
        names = tg.__dict__["_task_names"] = per_task(tg, "name", lambda tg, tasks: [str(t) for t in tasks])
    n = len(tg.tasks)
    # per op in order: one counter (op mode, even with no tasks) or one per task; its tasks' counters
    sizes = np.array([len(tg.by_op[op]) for op in order], dtype=np.int64)
    per_op = np.array([modes.get(op, "tile") == "op" for op in order], dtype=bool)
    counts = np.where(per_op, 1, sizes)
    first = np.cumsum(counts) - counts
    seq = fill_sequence(tg, order)
    local = np.arange(len(seq), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    of = np.empty(n, dtype=np.int64)
    of[seq] = np.repeat(first, sizes) + np.where(np.repeat(per_op, sizes), 0, local)
    full = np.ones(int(counts.sum()), dtype=np.int64)
    full[first[per_op]] = sizes[per_op]
    counter_names: list[str] = []
    for op, o in zip(order, per_op.tolist()):
        if o:
            counter_names.append(op)
        else:
            counter_names += [names[t] for t in tg.by_op[op]]
    nc = max(len(full), 1)
    dt, dp = dep_edges(tg)
    keys = sorted_unique(dt * nc + of[dp])   # each (waiter, counter) once
    wt, wc = keys // nc, keys % nc
    for a in (wt, wc):
        a.flags.writeable = False
    thr = full[wc]
    for a in (thr, full):
        a.flags.writeable = False
    return (tuple(counter_names), full, seq), (wt, wc, thr)


@gc_paused
def build_plan(g: Graph, knobs: Knobs) -> Plan:
    """Lower with the knobs' tile sizes, then fill the SM queues op by op.

    Each op's tasks go round-robin over its SM range, starting where the previous op left
    off, so consecutive small ops spread over the chip instead of piling onto SM 0. Every
    task waits, before it starts, on the counters of the tasks it depends on, with a
    threshold equal to the counter's producer count (a multi-producer counter is waited on
    in full, never in part).
    """
    tg = lower_cached(g, knobs.tiles, knobs.num_sms, knobs.fused, knobs.splits)
    order = knobs.order or tg.op_order()
    missing = [o for o in tg.op_order() if o not in order]
    if missing:
        raise ValueError(f"the op order leaves out {', '.join(missing[:5])}; every op must appear once")
    queues: list[list[int]] = [[] for _ in range(knobs.num_sms)]
    cursor = 0
    for op in order:
        lo, hi = knobs.sms.get(op, (0, knobs.num_sms - 1))
        width = hi - lo + 1
        start = cursor % width
        for i, tid in enumerate(tg.by_op[op]):
            queues[lo + (start + i) % width].append(tid)
        cursor += len(tg.by_op[op])
    counters, waits = _counters_and_waits(tg, order, knobs.counters)
    return Plan(tg, knobs.num_sms, queues, None, None, knobs, wait_arrays=tuple(waits), counter_arrays=counters)


__all__ = ["Knobs", "Counter", "Plan", "build_plan", "default_knobs", "COUNTER_MODES", "trusted_waits",
           "trusted_counters", "counter_count"]
