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

import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from megakernel_gym.compiler.pause_gc import gc_paused
from megakernel_gym.compiler.schedule import Plan, counter_count, fill_sequence, trusted_counters, trusted_waits
from megakernel_gym.compiler.tasks import KEPT_BYTES, dep_edges, kept, sorted_unique, trim_by_bytes


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


_PRODUCERS = attrgetter("producers")


@gc_paused
def check(plan: Plan) -> list[Finding]:
    """Every reason the plan is unsafe; empty when it is proven safe."""
    waits = trusted_waits(plan)
    if waits is None:
        waits = _wait_arrays(plan)
    producers = trusted_counters(plan)
    if producers is None:
        producers = _producer_arrays(plan)
    queues = _queue_arrays(plan)
    out = check_counters(plan, waits, producers, queues)
    if out:
        return out
    if waits is not None and _proven_safe(plan, waits, producers, queues):
        return out
    return _check_edges(plan)


def _queue_arrays(plan: Plan) -> tuple[np.ndarray, np.ndarray] | None:
    """The SM queues as (ptr, flat) arrays, queue s being flat[ptr[s]:ptr[s+1]], read from plan.queues
    each time (a plain list its holder may change); None where a queue entry is not an integer."""
    try:
        lens = np.fromiter(map(len, plan.queues), dtype=np.int64, count=len(plan.queues))
        flat = np.fromiter(chain.from_iterable(plan.queues), dtype=np.int64, count=int(lens.sum()))
    except (TypeError, ValueError, OverflowError):
        return None
    ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return ptr, flat


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
        lists = list(map(_PRODUCERS, plan.counters))
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        prods = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
    except (TypeError, ValueError, OverflowError):
        return None
    return lens, prods


def _proven_safe(plan: Plan, waits: tuple | None = None, producers: tuple | None = None,
                 queues: tuple | None = None) -> bool:
    """The common verdict at array speed, for a plan check_counters passed: True when the graph of
    queue order and full waits is acyclic and every dependency is ordered by one edge (a full wait
    on a counter its producer adds to, or an earlier place on the same SM). Then _check_edges
    would find nothing; otherwise (False) it runs, and its findings are check's.

    Acyclic is shown by a certificate where one checks out, else by scipy's strongly connected
    components (one per node): the certificate is a rank per task (its place in the op order's
    fill, _fill_rank) under which every queue edge and every producer -> counter -> waiter path
    goes up. The checks that read no queue (every dependency waited on; every wait above its
    counter's producers) are kept for build_plan's own wait arrays (_queue_free_verdicts)."""
    tg = plan.tg
    n = len(tg.tasks)
    nc = counter_count(plan)
    waits = waits if waits is not None else _wait_arrays(plan)
    if waits is None:
        return False
    wait_t, wait_c, _ = waits
    if len(wait_t) and not (0 <= int(wait_t.min()) and int(wait_t.max()) < n):
        return False                  # a waiter that is no task: left to the edge-by-edge check
    if len(wait_c) and int(wait_c.min()) < 0:
        return False                  # a wait on no counter: left to the edge-by-edge check
    producers = producers if producers is not None else _producer_arrays(plan)
    queues = queues if queues is not None else _queue_arrays(plan)
    if producers is None or queues is None:
        return False
    lens, prod_p = producers
    prod_c = np.repeat(np.arange(nc, dtype=np.int64), lens)
    if len(prod_p) and int(np.bincount(prod_p, minlength=n).max()) > 1:
        return False                  # a task adding to two counters: left to the edge-by-edge check
    counter_of = np.full(n, -1, dtype=np.int64)
    counter_of[prod_p] = prod_c
    ptr, flat = queues
    sm = np.empty(n, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    sm[flat] = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    pos[flat] = np.arange(len(flat), dtype=np.int64) - np.repeat(ptr[:-1], np.diff(ptr))
    # queue order edges: each entry to the next on the same queue
    inner = np.ones(max(len(flat) - 1, 0), dtype=bool)
    inner[ptr[1:-1][(ptr[1:-1] > 0) & (ptr[1:-1] < len(flat))] - 1] = False
    q_from, q_to = flat[:-1][inner], flat[1:][inner]
    verdicts = _queue_free_verdicts(plan, waits, producers)
    # -- every dependency ordered by one edge
    waited_all = verdicts.get("waited")
    if waited_all is None:
        waited_all = verdicts["waited"] = _waits_are_the_dependencies(tg, waits, counter_of, nc)
    if not waited_all:
        dt, dp = dep_edges(tg)
        same_sm = (sm[dp] == sm[dt]) & (pos[dp] < pos[dt])
        if not bool((same_sm | _dependency_waited(tg, waits, counter_of, nc)).all()):
            return False
    # -- deadlock-free: producer -> counter node -> waiter and queue order, with no cycle
    rank = _fill_rank(plan)
    if rank is not None:
        ranked = verdicts.get("ranked")
        if ranked is None:
            ranked = verdicts["ranked"] = _waits_ranked(rank, waits, producers)
        if ranked and bool((rank[q_from] < rank[q_to]).all()):
            return True
    rows = np.concatenate([prod_p, n + wait_c, q_from])
    cols = np.concatenate([n + prod_c, wait_t, q_to])
    nodes = n + nc
    # (a repeated edge sums its entries: int64 ones, so no count of repeats can wrap to zero)
    graph = csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(nodes, nodes))
    components, _ = connected_components(graph, directed=True, connection="strong")
    return components == nodes


def _dependency_waited(tg, waits: tuple, counter_of: np.ndarray, nc: int) -> np.ndarray:
    """Per dependency (dep_edges), whether its task waits on the counter its producer adds to."""
    wait_t, wait_c, _ = waits
    dt, dp = dep_edges(tg)
    # (waiter, counter) keys, sorted (build_plan lists them in order), looked up per dependency
    waited_keys = np.sort(wait_t * max(nc, 1) + wait_c, kind="stable")
    cp = counter_of[dp]
    keys = dt * max(nc, 1) + cp
    if not len(waited_keys):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(waited_keys, keys), len(waited_keys) - 1)
    return (cp >= 0) & (waited_keys[at] == keys)


def _waits_are_the_dependencies(tg, waits, counter_of, nc) -> bool:
    """True when the (task, counter) pairs the dependencies need, each once, are exactly the waits
    (build_plan's, sorted): then every dependency is ordered by its wait. False says nothing; the
    caller then looks each dependency up (_dependency_waited, with the same SM's queue order)."""
    wait_t, wait_c, _ = waits
    dt, dp = dep_edges(tg)
    cp = counter_of[dp]
    if len(cp) and int(cp.min()) < 0:
        return False
    keys = sorted_unique(dt * max(nc, 1) + cp)
    waited = wait_t * max(nc, 1) + wait_c
    return len(keys) == len(waited) and bool((keys == waited).all())


def _waits_ranked(rank: np.ndarray, waits: tuple, producers: tuple) -> bool:
    """Every wait's task ranks above all its counter's producers (a counter without producers
    orders nothing), so a counter node ranked just above its last producer sits between them."""
    wait_t, wait_c, _ = waits
    lens, prod_p = producers
    top = np.full(len(lens), -1, dtype=np.int64)
    some = lens > 0
    if bool(some.any()):
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])[some]
        top[some] = np.maximum.reduceat(rank[prod_p], starts)
    return bool((rank[wait_t] > top[wait_c]).all()) if len(wait_t) else True


_PROOF_LOCK = threading.Lock()


def _queue_free_verdicts(plan: Plan, waits: tuple, producers: tuple) -> dict:
    """Where the verdicts that read no queue are kept: for build_plan's own wait arrays
    (schedule.trusted_waits: read-only, never handed out as plan.waits), on the task graph, beside
    the waits, the counters' producers they were reached with and the op order (the fill rank's);
    used again only while the producers read from plan.counters and the order are the same. An edit
    of SM ranges or prefetch depths keeps the waits, so its plan is checked on its queues alone.
    Anything else gets a fresh dict (nothing kept)."""
    trusted = trusted_waits(plan)
    if trusted is None or waits is not trusted:
        return {}
    lens, prods = producers
    order = tuple(plan.knobs.order) if plan.knobs is not None else None
    tg = plan.tg
    with _PROOF_LOCK:   # task graphs are shared between threads (the lowering cache)
        store = tg.__dict__.setdefault("_queue_free_verdicts", OrderedDict())
        key = (id(waits[0]), id(waits[1]), id(waits[2]), order)
        hit = store.get(key)
        if hit is not None and all(a is b for a, b in zip(hit["waits"], waits)) and (
                (hit["lens"] is lens and hit["prods"] is prods)
                or (np.array_equal(hit["lens"], lens) and np.array_equal(hit["prods"], prods))):
            store.move_to_end(key)
            return hit
        keep = (lambda a: a) if trusted_counters(plan) is not None else np.copy   # build_plan's are read-only
        hit = store[key] = {"waits": waits, "lens": keep(lens), "prods": keep(prods)}
        while len(store) > 8:
            store.popitem(last=False)
        trim_by_bytes(store, KEPT_BYTES)   # each holds its waits alive (a 1B plan's: ~100 MB near the dependency cap)
        return hit


def _fill_rank(plan: Plan) -> np.ndarray | None:
    """Each task's place in the order build_plan fills the queues (the op order, each op's tasks in
    turn): the certificate _proven_safe checks; None where the plan has no op order covering every
    task once. Kept on the task graph per op order."""
    if plan.knobs is None or not plan.knobs.order:
        return None
    tg = plan.tg
    order = tuple(plan.knobs.order)
    n = len(tg.tasks)

    def build():
        try:
            seq = fill_sequence(tg, order)
        except KeyError:
            return None
        if len(seq) != n or (n and not (int(seq.min()) >= 0 and int(seq.max()) < n)):
            return None
        rank = np.full(n, -1, dtype=np.int64)
        rank[seq] = np.arange(n, dtype=np.int64)
        if n and int(rank.min()) < 0:
            return None   # a task twice, another never
        rank.flags.writeable = False
        return rank
    return kept(tg, "_fill_ranks", order, build)


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


def check_counters(plan: Plan, waits: tuple | None = None, producers: tuple | None = None,
                   queues: tuple | None = None) -> list[Finding]:
    """The first checks, shared by check and check_full: every task queued once, on an SM that
    exists; counters and waits that exist, each wait for its counter's full producer count.
    `waits`: _wait_arrays(plan), where the caller has them: the waits are then checked at array
    speed first, and one by one (for the findings, in order) only where something is wrong."""
    tg = plan.tg
    tasks = tg.tasks
    n = len(tasks)
    out: list[Finding] = []
    name = lambda t: str(tasks[t]) if 0 <= t < n else f"task #{t}"  # noqa: E731

    if waits is not None and producers is not None and _counted_at_array_speed(plan, waits, producers, queues):
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


def _counted_at_array_speed(plan: Plan, waits: tuple, producers: tuple, queues: tuple | None = None) -> bool:
    """check_counters' verdict when it finds nothing, at array speed: True when every task is queued
    exactly once on an SM that exists, every counter's producers are tasks, and every wait is on a
    counter that exists, for its full producer count. False sends check_counters through its
    checks one by one (for the findings)."""
    n = len(plan.tg.tasks)
    if len(plan.queues) != plan.num_sms:
        return False
    queues = queues if queues is not None else _queue_arrays(plan)
    if queues is None:
        return False
    queued = queues[1]
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
