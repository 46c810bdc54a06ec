"""The validator: proves a plan free of deadlock and races before anything runs.

The execution model is the persistent megakernel's: one resident block per SM runs its queue
in order; a task starts when each counter it waits on has reached its threshold; when it
finishes it adds 1 to each counter that lists it as a producer. Counters only grow.

- Deadlock-free iff the graph of "must finish before" edges (queue order on each SM, and
  producer -> waiter for every wait) is acyclic: then every SM's queue is a linear extension
  of the task DAG. A threshold above a counter's producer count can never be reached.
- Race-free iff every dependency the task graph derived (read-after-write, write-after-read,
  write-after-write) is ordered by those edges, transitively. Only a wait for a counter's full
  producer count orders anything: a partial wait on a multi-producer counter does not say
  which producers finished, so it is rejected.

Rejections name the op, the task, the counter, and the cycle or the missing producer.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from megakernel_gym.compiler.pause_gc import gc_paused
from megakernel_gym.compiler.schedule import Plan, trusted_waits
from megakernel_gym.compiler.tasks import dep_edges


class ScheduleError(ValueError):
    def __init__(self, findings: list["Finding"]):
        self.findings = findings
        more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
        super().__init__("unsafe schedule: " + "; ".join(f.message for f in findings[:3]) + more)


@dataclass
class Finding:
    kind: str          # coverage | counter | partial_wait | deadlock | race
    message: str
    op: str | None = None
    task: int | None = None
    counter: str | None = None


@gc_paused
def check(plan: Plan) -> list[Finding]:
    """Every reason the plan is unsafe; empty when it is proven safe."""
    waits = trusted_waits(plan)
    if waits is None:
        waits = _wait_arrays(plan)
    producers = _producer_arrays(plan)
    out = check_counters(plan, waits, producers)
    if out:
        return out
    if waits is not None and _proven_safe(plan, waits, producers):
        return out
    return _check_edges(plan)


def _wait_arrays(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every wait as (waiter, the counter's position in plan.counters or -1 where no counter has
    its id, threshold) arrays, read at C speed from plan.waits; None where a wait is not a
    (counter, threshold) pair of integers (the checks then go one by one)."""
    try:
        lists = list(plan.waits.values())
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        waiter = np.repeat(np.fromiter(plan.waits.keys(), dtype=np.int64, count=len(lists)), lens)
        pairs = np.fromiter(map(len, chain.from_iterable(lists)), dtype=np.int64, count=len(waiter))
        if not bool((pairs == 2).all()):
            return None
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(lists)), dtype=np.int64,
                           count=2 * len(waiter))
    except (TypeError, ValueError, OverflowError):
        return None
    cid, nc = flat[0::2], len(plan.counters)
    if all(c.id == i for i, c in enumerate(plan.counters)):   # build_plan numbers counters by position
        at = np.where((cid >= 0) & (cid < nc), cid, -1)
    else:
        idx = {c.id: i for i, c in enumerate(plan.counters)}
        at = np.fromiter((idx.get(c, -1) for c in cid.tolist()), dtype=np.int64, count=len(cid))
    return waiter, at, flat[1::2]


def _producer_arrays(plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
    """(each counter's producer count, every counter's producers in counter order) as arrays, for
    the array-speed checks; None where a producer is not an integer (the checks go one by one)."""
    try:
        lens = np.fromiter((len(c.producers) for c in plan.counters), dtype=np.int64, count=len(plan.counters))
        prods = np.fromiter(chain.from_iterable(c.producers for c in plan.counters), dtype=np.int64,
                            count=int(lens.sum()))
    except (TypeError, ValueError, OverflowError):
        return None
    return lens, prods


def _proven_safe(plan: Plan, waits: tuple | None = None, producers: tuple | None = None) -> bool:
    """The common verdict at array speed, for a plan check_counters passed: True when the graph of
    queue order and full waits is acyclic (scipy's strongly connected components, one per node)
    and every dependency is ordered by one edge (a full wait on a counter its producer adds to,
    or an earlier place on the same SM). Then _check_edges would find nothing; otherwise (False)
    it runs, and its findings are check's."""
    tg = plan.tg
    n = len(tg.tasks)
    nc = len(plan.counters)
    waits = waits if waits is not None else _wait_arrays(plan)
    if waits is None:
        return False
    wait_t, wait_c, _ = waits
    if len(wait_t) and not (0 <= int(wait_t.min()) and int(wait_t.max()) < n):
        return False                  # a waiter that is no task: left to the edge-by-edge check
    if len(wait_c) and int(wait_c.min()) < 0:
        return False                  # a wait on no counter: left to the edge-by-edge check
    producers = producers if producers is not None else _producer_arrays(plan)
    if producers is None:
        return False
    lens, prod_p = producers
    prod_c = np.repeat(np.arange(nc, dtype=np.int64), lens)
    if len(prod_p) and int(np.bincount(prod_p, minlength=n).max()) > 1:
        return False                  # a task adding to two counters: left to the edge-by-edge check
    counter_of = np.full(n, -1, dtype=np.int64)
    counter_of[prod_p] = prod_c
    sm = np.empty(n, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    q_from, q_to = [], []
    for s, q in enumerate(plan.queues):
        sm[q] = s
        pos[q] = np.arange(len(q))
        q_from += q[:-1]
        q_to += q[1:]
    # -- every dependency ordered by one edge
    dt, dp = dep_edges(tg)
    same_sm = (sm[dp] == sm[dt]) & (pos[dp] < pos[dt])
    cp = counter_of[dp]
    # (waiter, counter) keys, sorted (build_plan lists them nearly in order), looked up per dependency
    waited_keys = np.sort(wait_t * max(nc, 1) + wait_c, kind="stable")
    keys = dt * max(nc, 1) + cp
    at = np.minimum(np.searchsorted(waited_keys, keys), max(len(waited_keys) - 1, 0))
    waited = (cp >= 0) & (waited_keys[at] == keys) if len(waited_keys) else np.zeros(len(keys), dtype=bool)
    if not bool((same_sm | waited).all()):
        return False
    # -- deadlock-free: producer -> counter node -> waiter and queue order, with no cycle
    rows = np.concatenate([prod_p, n + wait_c, np.asarray(q_from, dtype=np.int64)])
    cols = np.concatenate([n + prod_c, wait_t, np.asarray(q_to, dtype=np.int64)])
    nodes = n + nc
    # (a repeated edge sums its entries: int64 ones, so no count of repeats can wrap to zero)
    graph = csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(nodes, nodes))
    components, _ = connected_components(graph, directed=True, connection="strong")
    return components == nodes


def _check_edges(plan: Plan) -> list[Finding]:
    """check past check_counters, edge by edge: deadlock over counter nodes, then every dependency
    ordered by one edge or, failing that, by the transitive closure."""
    out: list[Finding] = []
    tg = plan.tg
    n = len(tg.tasks)
    by_id = {c.id: c for c in plan.counters}

    # -- deadlock: queue order + full waits must be acyclic. Each counter is a node of its own
    # (producers -> counter -> waiter), so a wait is one edge, not one per producer: a path through
    # a counter node is a producer -> waiter edge and back, so the two graphs have the same cycles
    # and order the same tasks (check_full keeps the producer -> waiter form, for the tests).
    cix = {cid: n + j for j, cid in enumerate(by_id)}
    nodes = n + len(cix)
    preds: list[list[int]] = [[] for _ in range(nodes)]
    for cid, c in by_id.items():
        preds[cix[cid]] = [p for p in c.producers if 0 <= p < n]
    waited: dict[int, set[int]] = {}                # waiter -> counter nodes it waits on in full
    for t, ws in plan.waits.items():
        for cid, _ in ws:
            if cix[cid] not in waited.setdefault(t, set()):
                waited[t].add(cix[cid])
                preds[t].append(cix[cid])
    sm_pos: dict[int, tuple[int, int]] = {}
    for s, q in enumerate(plan.queues):
        for i, t in enumerate(q):
            sm_pos[t] = (s, i)
        for a, b in zip(q, q[1:]):
            preds[b].append(a)
    topo = _toposort(nodes, preds)
    if topo is None:
        return check_full(plan)     # names the cycle in the producer -> waiter form

    # -- races: every derived dependency must be ordered (transitively). Most are ordered by one
    # edge: a full wait on a counter the producer adds to, or the same SM's queue; only the rest
    # need the transitive closure (ancestor bitsets over the graph above).
    produces: dict[int, set[int]] = {}
    for cid, c in by_id.items():
        for p in c.producers:
            produces.setdefault(p, set()).add(cix[cid])
    anc: list[int] | None = None
    counter_names = plan.counter_of_task()
    for t in range(n):
        mine, (st, it) = waited.get(t, set()), sm_pos[t]
        for p in sorted(tg.deps[t]):
            sp, ip = sm_pos.get(p, (-1, 0))
            if (sp == st and ip < it) or (mine and not mine.isdisjoint(produces.get(p, ()))):
                continue
            if anc is None:
                anc = _ancestors(topo, preds, n)
            if not (anc[t] >> p) & 1:
                out.append(_race(plan, t, p, by_id, counter_names))
    return out


def _ancestors(topo: list[int], preds: list[list[int]], n: int) -> list[int]:
    """Per node, the tasks (nodes below n) it comes after, as a bitset."""
    anc = [0] * len(preds)
    for t in topo:
        acc = 0
        for p in preds[t]:
            acc |= anc[p] | ((1 << p) if p < n else 0)
        anc[t] = acc
    return anc


def check_full(plan: Plan) -> list[Finding]:
    """check() as first written: every wait an edge from each of its counter's producers, and the
    transitive closure for every dependency. The reference the faster check() is tested against
    (the same findings, in the same order, on every plan), and the form a deadlock is named in."""
    tg = plan.tg
    tasks = tg.tasks
    n = len(tasks)
    name = lambda t: str(tasks[t]) if 0 <= t < n else f"task #{t}"  # noqa: E731
    pre = check_counters(plan)
    if pre:
        return pre
    out: list[Finding] = []
    by_id = {c.id: c for c in plan.counters}
    full_wait_edges: dict[int, set[int]] = {t: set() for t in range(n)}   # waiter -> producers ordered
    for t, ws in plan.waits.items():
        for cid, _ in ws:
            full_wait_edges[t].update(p for p in by_id[cid].producers if 0 <= p < n)
    # -- deadlock: queue order + full waits must be acyclic
    preds: dict[int, set[int]] = {t: set(full_wait_edges[t]) for t in range(n)}
    for q in plan.queues:
        for a, b in zip(q, q[1:]):
            preds[b].add(a)
    topo = _toposort(n, preds)
    if topo is None:
        cycle = _find_cycle(n, preds)
        sm = plan.sm_of()
        steps = []
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            if a in full_wait_edges[b]:
                cname = next(by_id[cid].name for cid, _ in plan.waits.get(b, []) if a in by_id[cid].producers)
                steps.append(f"{name(b)} waits on counter {cname} for {name(a)}")
            else:
                steps.append(f"{name(b)} runs after {name(a)} on SM {sm[b]}")
        first = cycle[0]
        out.append(Finding("deadlock", "deadlock cycle: " + "; ".join(steps), op=tasks[first].op, task=first))
        return out

    # -- races: every derived dependency must be ordered (transitively)
    anc = _ancestors(topo, preds, n)
    counter_names = plan.counter_of_task()
    for t in range(n):
        for p in sorted(tg.deps[t]):
            if not (anc[t] >> p) & 1:
                out.append(_race(plan, t, p, by_id, counter_names))
    return out


def check_counters(plan: Plan, waits: tuple | None = None, producers: tuple | None = None) -> list[Finding]:
    """The first checks, shared by check and check_full: every task queued once, on an SM that
    exists; counters and waits that exist, each wait for its counter's full producer count.
    `waits`: _wait_arrays(plan), where the caller has them: the waits are then checked at array
    speed first, and one by one (for the findings, in order) only where something is wrong."""
    tg = plan.tg
    tasks = tg.tasks
    n = len(tasks)
    out: list[Finding] = []
    name = lambda t: str(tasks[t]) if 0 <= t < n else f"task #{t}"  # noqa: E731

    if waits is not None and producers is not None and _counted_at_array_speed(plan, waits, producers):
        return out
    # -- coverage: every task exactly once, on an SM that exists
    if len(plan.queues) != plan.num_sms:
        out.append(Finding("coverage", f"{len(plan.queues)} queues for {plan.num_sms} SMs"))
    seen: dict[int, int] = {}
    for s, q in enumerate(plan.queues):
        for t in q:
            if not 0 <= t < n:
                out.append(Finding("coverage", f"SM {s} queues unknown task #{t}", task=t))
            elif t in seen:
                out.append(Finding("coverage", f"{name(t)} is queued twice (SM {seen[t]} and SM {s})",
                                   op=tasks[t].op, task=t))
            else:
                seen[t] = s
    for t in range(n):
        if t not in seen:
            out.append(Finding("coverage", f"{name(t)} is on no SM's queue, so it never runs and its "
                               "consumers wait forever", op=tasks[t].op, task=t))
    if out:
        return out

    # -- counters and waits
    for c in plan.counters:
        bad = [p for p in c.producers if not 0 <= p < n]
        if bad:
            out.append(Finding("counter", f"counter {c.name} lists unknown producer tasks {bad}", counter=c.name))
    if waits is not None and not out:
        _, at, thr = waits
        if bool((at >= 0).all()):
            full = np.fromiter((len(c.producers) for c in plan.counters), dtype=np.int64, count=len(plan.counters))
            if bool((thr == full[at]).all()):
                return out
    by_id = {c.id: c for c in plan.counters}
    for t, ws in plan.waits.items():
        for cid, thr in ws:
            c = by_id.get(cid)
            if c is None:
                out.append(Finding("counter", f"{name(t)} waits on counter #{cid}, which does not exist",
                                   op=tasks[t].op, task=t))
                continue
            if thr > len(c.producers):
                out.append(Finding("deadlock", f"{name(t)} waits for counter {c.name} to reach {thr}, but only "
                                   f"{len(c.producers)} task(s) ever increment it", op=tasks[t].op, task=t,
                                   counter=c.name))
            elif thr < len(c.producers):
                out.append(Finding("partial_wait", f"{name(t)} waits for {thr} of the {len(c.producers)} producers "
                                   f"of counter {c.name}: a partial wait does not say which finished; wait for all",
                                   op=tasks[t].op, task=t, counter=c.name))
    return out


def _counted_at_array_speed(plan: Plan, waits: tuple, producers: tuple) -> bool:
    """check_counters' verdict when it finds nothing, at array speed: True when every task is queued
    exactly once on an SM that exists, every counter's producers are tasks, and every wait is on a
    counter that exists, for its full producer count. False sends check_counters through its
    checks one by one (for the findings)."""
    n = len(plan.tg.tasks)
    if len(plan.queues) != plan.num_sms:
        return False
    try:
        queued = np.fromiter(chain.from_iterable(plan.queues), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return False
    full, prods = producers
    if len(queued) != n or (n and not (0 <= int(queued.min()) and int(queued.max()) < n)):
        return False
    if n and not bool((np.bincount(queued, minlength=n) == 1).all()):
        return False
    if len(prods) and not (0 <= int(prods.min()) and int(prods.max()) < n):
        return False
    _, at, thr = waits
    if not bool((at >= 0).all()):
        return False
    return bool((thr == full[at]).all()) if len(at) else True


def validate(plan: Plan) -> Plan:
    """Return the plan if it is proven safe; otherwise raise ScheduleError naming the problems."""
    findings = check(plan)
    if findings:
        raise ScheduleError(findings)
    return plan


def _race(plan: Plan, t: int, p: int, by_id: dict, counter_names: dict[int, list[int]]) -> Finding:
    """The finding for task t, which touches what task p does with nothing ordering it after p."""
    tasks = plan.tg.tasks
    shared = _shared_tensor(tasks[t], tasks[p])
    cname = by_id[counter_names[p][0]].name if counter_names.get(p) else None
    hint = f"wait on counter {cname}" if cname else f"give {tasks[p]} a counter and wait on it"
    return Finding("race", f"{tasks[t]} touches {shared} that {tasks[p]} writes or reads, but nothing "
                   f"makes it wait for {tasks[p]} (missing producer): {hint}", op=tasks[t].op, task=t, counter=cname)


def _shared_tensor(a, b) -> str:
    for ra in a.reads + a.writes:
        for rb in b.reads + b.writes:
            if ra.overlaps(rb):
                return f"tensor {ra.tensor}"
    return "memory"


def _toposort(n: int, preds: dict[int, set[int]]) -> list[int] | None:
    indeg = [len(preds[t]) for t in range(n)]
    succ: dict[int, list[int]] = {t: [] for t in range(n)}
    for t in range(n):
        for p in preds[t]:
            succ[p].append(t)
    ready = [t for t in range(n) if indeg[t] == 0]
    order = []
    while ready:
        t = ready.pop()
        order.append(t)
        for s in succ[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order if len(order) == n else None


def _find_cycle(n: int, preds: dict[int, set[int]]) -> list[int]:
    """One cycle of the must-finish-before graph, in execution direction."""
    color = [0] * n
    stack_pos: dict[int, int] = {}
    path: list[int] = []
    for start in range(n):
        if color[start]:
            continue
        stack = [(start, iter(sorted(preds[start])))]
        color[start] = 1
        stack_pos[start] = 0
        path = [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                stack_pos.pop(node, None)
                continue
            if color[nxt] == 1:
                cyc = path[stack_pos[nxt]:]
                return list(reversed(cyc))   # preds edges point backwards in time
            if color[nxt] == 0:
                color[nxt] = 1
                stack_pos[nxt] = len(path)
                path.append(nxt)
                stack.append((nxt, iter(sorted(preds[nxt]))))
    return []


__all__ = ["check", "validate", "ScheduleError", "Finding"]
