"""The CPU reference VM: executes a plan's SM queues with real counter semantics, on real tiles.

Execution model (the persistent megakernel's): one resident block per SM runs its queue in
order; the task at the head of a queue may start once every counter it waits on has reached its
threshold; when it finishes it adds 1 to each counter that lists it as a producer. Which ready
SM goes next is the interleaving, chosen by an rng: uniformly, or adversarially (favouring
tasks whose producers have not finished, and holding back a random set of slow SMs), so an
unsafe plan shows itself in some interleaving instead of passing by luck.

Two entry points share that scheduler core:

- `simulate(plan, rng)`: order only, no numbers. Reports the first task that starts before a
  producer it depends on has finished (a race), or a state where tasks remain and no SM can
  start one (a deadlock). The independent check the validator is tested against.
- `run_plan(plan, params, inputs, rng)`: the numbers. A flat memory of named base tensors
  (inputs, weights, copies of the buffers the plan writes, and activations pre-filled with
  NaN so an element nothing wrote shows in the result) that each task reads its input boxes
  from and writes exactly its output tile into, computed by the op's reference semantics
  (interpret.reference_op) on those boxes. Views cost nothing: a read through a view applies
  the view to its base's current memory. A task that runs too early therefore reads NaN or
  stale data and the result visibly differs: the VM's numbers depend on the order it ran, which
  is what makes it the correctness oracle for the sim backend and the GPU megakernel.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from megakernel_gym.compiler import ops
from megakernel_gym.compiler.graph import Graph, Op
from megakernel_gym.compiler.interpret import bind_tensors, reference_op, torch_dtype
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import input_boxes, task_boxes


class VMError(RuntimeError):
    """The VM could not execute the plan as given (the message names the task and why)."""


class DeadlockError(VMError):
    """Tasks remain and no SM can start its next one."""


class RaceError(VMError):
    """A task started before a task it depends on had finished."""

    def __init__(self, message: str, task: int, producer: int):
        self.task, self.producer = task, producer
        super().__init__(message)


# ---------------------------------------------------------------------------------------------
# scheduler core


class _Machine:
    """SM queue heads and counters; a task finishes the moment it is started."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.deps = plan.tg.deps
        self.counters = {c.id: 0 for c in plan.counters}
        self.bumps = plan.counter_of_task()
        self.head = [0] * len(plan.queues)
        self.done: set[int] = set()
        self.order: list[int] = []
        self.total = sum(len(q) for q in plan.queues)
        self.live = [s for s, q in enumerate(plan.queues) if q]   # SMs with work left, in order
        self.met = [False] * len(plan.queues)   # head's waits known met (counters only grow)
        self.blocked: list[tuple[int, int] | None] = [None] * len(plan.queues)  # a wait not met yet

    def running(self) -> bool:
        return len(self.order) < self.total

    def head_task(self, s: int) -> int | None:
        q = self.plan.queues[s]
        return q[self.head[s]] if self.head[s] < len(q) else None

    def ready(self) -> list[int]:
        """SMs whose next task may start now, in SM order."""
        out = []
        counters = self.counters
        for s in self.live:
            if not self.met[s]:
                b = self.blocked[s]
                if b is not None and counters.get(b[0], 0) < b[1]:
                    continue          # still short on the wait that blocked it last time
                waits = self.plan.waits.get(self.head_task(s), [])
                self.blocked[s] = next(((c, thr) for c, thr in waits if counters.get(c, 0) < thr), None)
                if self.blocked[s] is not None:
                    continue
                self.met[s] = True
            out.append(s)
        return out

    def unfinished_deps(self, t: int) -> set[int]:
        return self.deps[t] - self.done

    def finish(self, s: int) -> int:
        q = self.plan.queues[s]
        t = q[self.head[s]]
        self.head[s] += 1
        self.met[s] = False
        self.blocked[s] = None
        if self.head[s] == len(q):
            self.live.remove(s)
        self.done.add(t)
        self.order.append(t)
        for c in self.bumps.get(t, []):
            self.counters[c] += 1
        return t

    def stuck(self) -> list[tuple[int, int]]:
        """(SM, its next task) for every SM with work left."""
        return [(s, t) for s in range(len(self.plan.queues)) if (t := self.head_task(s)) is not None]

    def deadlock_message(self) -> str:
        tasks = self.plan.tg.tasks
        by_id = {c.id: c for c in self.plan.counters}
        lines = []
        for s, t in self.stuck()[:6]:
            unmet = []
            for c, thr in self.plan.waits.get(t, []):
                have = self.counters.get(c, 0)
                if have < thr:
                    cname = by_id[c].name if c in by_id else f"#{c} (no such counter)"
                    total = len(by_id[c].producers) if c in by_id else 0
                    unmet.append(f"counter {cname} at {have}, needs {thr} ({total} producer(s))")
            lines.append(f"SM {s} at {tasks[t]} waits on " + (", ".join(unmet) or "nothing"))
        more = len(self.stuck()) - len(lines)
        return (f"deadlock after {len(self.order)} of {self.total} tasks: no SM can start its next "
                f"task: " + "; ".join(lines) + (f"; and {more} more SM(s)" if more > 0 else "")
                + ". compiler.validate.check(plan) names the cycle or the unreachable threshold")


def _as_rng(rng) -> random.Random:
    if rng is None:
        return random.Random(0)
    if isinstance(rng, int):
        return random.Random(rng)
    return rng


@dataclass
class SimResult:
    outcome: str            # ok | race | deadlock
    detail: str = ""
    order: list[int] | None = None


def simulate(plan: Plan, rng: random.Random | None = None, adversarial: bool = True) -> SimResult:
    """Run the queues under one interleaving; stop at the first race or at a deadlock."""
    rng = rng or random.Random(0)
    tg = plan.tg
    m = _Machine(plan)
    while m.running():
        ready = m.ready()
        if not ready:
            stuck = [str(tg.tasks[t]) for _, t in m.stuck()]
            return SimResult("deadlock", "no SM can start its next task: " + ", ".join(stuck[:6]), m.order)
        if adversarial:
            # prefer a task whose dependencies are not all done: the interleaving that exposes races
            eager = [s for s in ready if m.unfinished_deps(m.head_task(s))]
            s = rng.choice(eager) if eager and rng.random() < 0.8 else rng.choice(ready)
        else:
            s = rng.choice(ready)
        t = m.head_task(s)
        missing = m.unfinished_deps(t)
        if missing:
            p = min(missing)
            return SimResult("race", f"{tg.tasks[t]} started before {tg.tasks[p]} finished", m.order)
        m.finish(s)
    return SimResult("ok", "", m.order)


class _Adversary:
    """Picks the next SM so that ordering bugs surface: mostly a task whose producers have not
    finished, otherwise one of the SMs not currently held back as slow (a random set, redrawn
    now and then, as if those SMs were stalled on memory or preempted)."""

    def __init__(self, num_sms: int, rng: random.Random):
        self.rng = rng
        self.num_sms = num_sms
        self.slow = self._draw()

    def _draw(self) -> set[int]:
        return {s for s in range(self.num_sms) if self.rng.random() < 0.5}

    def pick(self, ready: list[int], m: _Machine) -> int:
        rng = self.rng
        if rng.random() < 0.02:
            self.slow = self._draw()
        eager = [s for s in ready if m.unfinished_deps(m.head_task(s))]
        if eager and rng.random() < 0.7:
            return rng.choice(eager)
        fast = [s for s in ready if s not in self.slow]
        if fast and rng.random() < 0.9:
            return rng.choice(fast)
        return rng.choice(ready)


# ---------------------------------------------------------------------------------------------
# memory


def _poison(shape, dtype: torch.dtype) -> Tensor:
    """A tensor whose every element says 'never written'."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.full(shape, float("nan"), dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype)


def _cut(t: Tensor, box, what: str) -> Tensor:
    if len(box) != t.dim():
        raise VMError(f"{what}: a box of rank {len(box)} cannot index a tensor of shape "
                      f"{list(t.shape)}; the op's tiling rule (tasks.input_boxes) does not fit it")
    return t[tuple(slice(lo, hi) for lo, hi in box)]


class _Memory:
    """Named base tensors; a view name reads through to its base's current contents."""

    def __init__(self, graph: Graph, params: dict[str, Tensor], inputs: dict[str, Tensor]):
        self.graph = graph
        self.views: dict[str, Op] = {o.outputs[0]: o for o in graph.ops if o.kind == "view"}
        # the caller's caches are never written: the plan updates a copy
        self.base: dict[str, Tensor] = bind_tensors(graph, params, inputs, "run_plan", skip=self.views)
        self.scratch: dict[tuple[str, int], dict[int, tuple]] = {}   # split attention tile -> its parts' partials
        for name, spec in graph.tensors.items():
            if name not in self.views and spec.kind in ("activation", "output"):
                self.base[name] = _poison(spec.shape, torch_dtype(spec.dtype))

    def base_of(self, name: str) -> str:
        while name in self.views:
            name = self.views[name].inputs[0]
        return name

    def tensor(self, name: str) -> Tensor:
        """The current contents of `name` (a view applied to its base's memory now)."""
        op = self.views.get(name)
        if op is None:
            return self.base[name]
        return reference_op(op, [self.tensor(op.inputs[0])], self.graph.tensors[name])

    def writable(self, name: str) -> Tensor:
        t = self.tensor(name)
        base = self.base[self.base_of(name)]
        if t.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
            raise VMError(f"run_plan: {name!r} is a view of {self.base_of(name)!r} that copies "
                          f"(a reshape of non-contiguous memory), so an op cannot write through it")
        return t


def _run_task(mem: _Memory, plan: Plan, tid: int, op: Op) -> None:
    """Compute task `tid`'s output tile from its input boxes, both in memory. Fused producers
    first: the parts of their outputs this task reads (in the megakernel those stay on chip)."""
    task = plan.tg.tasks[tid]
    for pname, pbox in task.prologue:
        pop = mem.graph.op(pname)
        _compute(mem, pop, pbox, input_boxes(pop, mem.graph, pbox), f"{task} (fused {pname})")
    obox, reads = task_boxes(plan.tg, task, op)
    if task.parts > 1:
        _compute_part(mem, op, task, obox, reads)
    else:
        _compute(mem, op, obox, reads, str(task))


def _compute_part(mem: _Memory, op: Op, task, obox, reads) -> None:
    """One part of a split attention tile: its partial sums go to the tile's scratch; the part that
    finds all the others there (the last to run, as the megakernel's arrival count decides) combines
    them into the output tile. Before that, the output holds whatever it held: a consumer that runs
    early reads it."""
    q, kc, vc, pos = (_cut(mem.tensor(name), box, f"{task} reading {name}") for name, box in reads)
    partial = ops.decode_attention_part_ref(q, kc, vc, pos, float(op.attrs["scale"]), task.part, task.parts,
                                           int(op.attrs.get("window", 0)))
    got = mem.scratch.setdefault((op.name, task.tile), {})
    got[task.part] = partial
    if len(got) == task.parts:
        dst = _cut(mem.writable(op.outputs[0]), obox, f"{task} writing {op.outputs[0]}")
        dst.copy_(ops.combine_attention_parts([got[p] for p in range(task.parts)], dst.dtype))
        del mem.scratch[(op.name, task.tile)]


def _compute(mem: _Memory, op: Op, obox, reads, task: str) -> None:
    out_name = op.outputs[0]
    out_spec = mem.graph.tensors[out_name]
    args = [_cut(mem.tensor(name), box, f"{task} reading {name}") for name, box in reads]
    dst = _cut(mem.writable(out_name), obox, f"{task} writing {out_name}")
    if op.kind == "cache_write":
        args = [dst] + args           # writes the cache tile in place, at positions pos[b]
    tile_shape = tuple(hi - lo for lo, hi in obox)
    result = reference_op(op, args, replace(out_spec, shape=tile_shape))
    if result is None:
        return
    if tuple(result.shape) == tile_shape:
        dst.copy_(result)
    elif tuple(result.shape) == out_spec.shape:
        # ops tiled coarsely (reduce reads its whole input): the tile is a slice of the result
        dst.copy_(_cut(result, obox, f"{task}"))
    else:
        raise VMError(f"{task} ({op.kind}) computed shape {list(result.shape)} for a tile of "
                      f"{list(tile_shape)} (output {list(out_spec.shape)})")


# ---------------------------------------------------------------------------------------------
# numeric execution


@dataclass
class VMResult:
    outputs: dict[str, Tensor]                  # graph outputs and the buffers the plan wrote
    order: list[int]                            # task ids in the order they ran
    races: list[tuple[int, int]] = field(default_factory=list)   # (task, unfinished producer)

    def race_messages(self, plan: Plan) -> list[str]:
        tasks = plan.tg.tasks
        return [f"{tasks[t]} started before {tasks[p]} finished" for t, p in self.races]


RACE_MODES = ("raise", "run")


def execute_plan(plan: Plan, params: dict[str, Tensor], inputs: dict[str, Tensor],
                 rng: random.Random | int | None = None, adversarial: bool = False,
                 races: str = "raise") -> VMResult:
    """Execute every task of `plan` on the CPU, in an interleaving the rng picks.

    A task starts only when its waits are met; no SM able to start one raises DeadlockError.
    A task that starts before a task it depends on (per the task graph) has finished is a race:
    races="raise" raises RaceError naming both; races="run" executes it anyway, with whatever
    memory holds at that moment, and lists it in the result, so the damage shows in the numbers.
    """
    if races not in RACE_MODES:
        raise ValueError(f"races={races!r}; use one of {', '.join(RACE_MODES)}")
    tg = plan.tg
    n = len(tg.tasks)
    for s, q in enumerate(plan.queues):
        bad = [t for t in q if not (isinstance(t, int) and 0 <= t < n)]
        if bad:
            raise VMError(f"SM {s} queues unknown task id(s) {bad[:5]}; the task graph has {n} tasks")
    rng = _as_rng(rng)
    graph = tg.graph
    ops = {o.name: o for o in graph.ops}
    mem = _Memory(graph, params, inputs)
    m = _Machine(plan)
    adversary = _Adversary(len(plan.queues), rng) if adversarial else None
    found: list[tuple[int, int]] = []
    while m.running():
        ready = m.ready()
        if not ready:
            raise DeadlockError(m.deadlock_message())
        s = adversary.pick(ready, m) if adversary else rng.choice(ready)
        t = m.head_task(s)
        missing = m.unfinished_deps(t)
        if missing:
            p = min(missing)
            if races == "raise":
                raise RaceError(f"race: {tg.tasks[t]} (SM {s}) started before {tg.tasks[p]} "
                                f"finished; its waits do not cover that dependency "
                                f"(compiler.validate.check(plan) names the missing wait)", t, p)
            found.append((t, p))
        _run_task(mem, plan, t, ops[tg.tasks[t].op])
        m.finish(s)
    outputs = {name: mem.tensor(name) for name in graph.outputs}
    outputs.update({name: mem.base[name] for name in graph.written_buffers()})
    return VMResult(outputs, m.order, found)


def run_plan(plan: Plan, params: dict[str, Tensor], inputs: dict[str, Tensor],
             rng: random.Random | int | None = None, adversarial: bool = False,
             races: str = "raise") -> dict[str, Tensor]:
    """The graph outputs and updated buffers after executing `plan` (as run_graph returns them).

    params: weights and buffers by name (capture.module_tensors(module)); inputs: the graph's
    inputs by name. Neither is modified: feeding the returned buffers back as params runs the
    next decode step. See execute_plan for the interleaving, deadlock and race semantics.
    """
    return execute_plan(plan, params, inputs, rng, adversarial, races).outputs


__all__ = ["simulate", "SimResult", "run_plan", "execute_plan", "VMResult", "VMError",
           "DeadlockError", "RaceError", "RACE_MODES"]
