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

from megakernel_gym.compiler.graph import Graph
from megakernel_gym.compiler.pause_gc import gc_paused
from megakernel_gym.compiler.tasks import TaskGraph, lower_cached

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

    def copy(self) -> "Knobs":
        return Knobs(self.num_sms, dict(self.tiles), dict(self.sms), list(self.order), dict(self.counters),
                     dict(self.prefetch), dict(self.fused), dict(self.splits))


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
    counters: list[Counter]
    waits: dict[int, list[tuple[int, int]]]        # task -> [(counter id, threshold)]
    knobs: Knobs | None = None

    def sm_of(self) -> dict[int, int]:
        return {t: s for s, q in enumerate(self.queues) for t in q}

    def counter_of_task(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for c in self.counters:
            for p in c.producers:
                out.setdefault(p, []).append(c.id)
        return out


def default_knobs(g: Graph, num_sms: int = 132) -> Knobs:
    return Knobs(num_sms=num_sms, order=[o.name for o in g.ops if o.kind != "view"])


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
    counters: list[Counter] = []
    counter_for: dict[int, int] = {}
    for op in order:
        mode = knobs.counters.get(op, "tile")
        ids = tg.by_op[op]
        if mode == "op":
            c = Counter(len(counters), op, list(ids))
            counters.append(c)
            for tid in ids:
                counter_for[tid] = c.id
        else:
            for tid in ids:
                c = Counter(len(counters), str(tg.tasks[tid]), [tid])
                counters.append(c)
                counter_for[tid] = c.id
    waits: dict[int, list[tuple[int, int]]] = {}
    for t in tg.tasks:
        need = sorted({counter_for[p] for p in tg.deps[t.id]})
        waits[t.id] = [(c, len(counters[c].producers)) for c in need]
    return Plan(tg, knobs.num_sms, queues, counters, waits, knobs)


__all__ = ["Knobs", "Counter", "Plan", "build_plan", "default_knobs", "COUNTER_MODES"]
