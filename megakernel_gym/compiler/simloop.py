"""The cost model's list schedule (costmodel.predict's inner loop), compiled.

`list_schedule` walks the SM queues round-robin, starting each task once every wait group it needs
is complete, and gives every task its start, finish and preloaded ring bytes. It is one function
written for both a compiled and a plain-Python run: numba compiles it (`numba.njit`, cached on
disk) where numba imports, and it runs as Python over lists where it does not. The walk is
sequential (a task's start depends on its SM's previous finish and its producers' finishes, and
its duration on how long its SM waited), so array code does not help: a 1B decoder's 20k tasks
took 25-40 ms a prediction in Python and take well under a millisecond compiled. Both runs do the
same float operations in the same order, so they agree to the bit (tests/test_simloop.py).
"""
from __future__ import annotations

import os
from itertools import chain

import numpy as np

try:   # numba: a well-kept JIT for exactly this kind of loop; the sim works without it, slower
    if os.environ.get("MKGYM_NO_NUMBA"):
        raise ImportError("MKGYM_NO_NUMBA is set")
    import numba
except ImportError:
    numba = None


def _list_schedule(q_ptr, q_tasks, need_ptr, need_idx, add_ptr, add_idx, gsize,
                   own, rate, wb, trip_us, lat_us, compute, fixed,
                   hop, free_bytes, ring_bytes, hide, pre_rate, chide, gtail, hbusy, gscale,
                   start, finish, preloaded, busy):
    """Fill start/finish/preloaded (per task) and busy (per SM); return how many tasks could not
    start (0 unless the plan deadlocks). Queues, needs and group members are CSR arrays:
    q_tasks[q_ptr[s]:q_ptr[s+1]] is SM s's queue, need_idx[need_ptr[t]:need_ptr[t+1]] the groups
    task t waits on, add_idx[add_ptr[t]:add_ptr[t+1]] the groups t is a producer of, gsize[g] a
    group's producer count; hop[t]: how long after task t finishes its readers see it; hide[t]: how
    much of task t's time its SM's wait for its inputs may take in (its first loads are its polls);
    pre_rate[t]: how fast its ring loads its weights while its SM waits (rate[t] once it runs);
    chide[t]: how much of its compute path the wait takes in (at least hide[t]: the loads of its
    input vectors are its polls too); gtail[g]: how long past its last producer's signal group g's
    readers see it complete (the spread of its producers' finishes the schedule does not draw);
    hbusy[t] * gscale[g]: more of task t's hop, as group g's readers see it."""
    nsm = len(q_ptr) - 1
    left = [0] * len(gsize)
    last = [0.0] * len(gsize)
    for g in range(len(gsize)):
        left[g] = gsize[g]
    head = [0] * nsm
    sm_free = [0.0] * nsm
    remaining = len(q_tasks)
    while remaining:
        progressed = False
        for s in range(nsm):
            h = q_ptr[s] + head[s]
            end = q_ptr[s + 1]
            while h < end:
                t = q_tasks[h]
                ready = sm_free[s]
                blocked = False
                for k in range(need_ptr[t], need_ptr[t + 1]):
                    c = need_idx[k]
                    if left[c]:
                        blocked = True
                        break
                    if last[c] + gtail[c] > ready:
                        ready = last[c] + gtail[c]
                if blocked:
                    break
                start[t] = ready
                # the ring keeps loading while the task makes its round trips before its rows
                got = 0.0
                if wb[t]:
                    got = min(wb[t], free_bytes[t] + (ready - sm_free[s]) * pre_rate[t] + trip_us[t] * rate[t],
                              ring_bytes[t])
                preloaded[t] = got
                waited = ready - sm_free[s]
                taken = min(waited, hide[t])
                dur = max((own[t] - got) / rate[t] + lat_us[t] - taken,
                          compute[t] - max(taken, min(waited, chide[t]))) + fixed[t]
                if dur < 0.0:
                    dur = 0.0
                f = ready + dur
                finish[t] = f
                seen = f + hop[t]
                hb = hbusy[t]
                if hb:      # a busy part its readers' groups scale (busy_scale): a loop of its own, off the common path
                    for k in range(add_ptr[t], add_ptr[t + 1]):
                        c = add_idx[k]
                        left[c] -= 1
                        seen_c = seen + hb * gscale[c]
                        if seen_c > last[c]:
                            last[c] = seen_c
                else:
                    for k in range(add_ptr[t], add_ptr[t + 1]):
                        c = add_idx[k]
                        left[c] -= 1
                        if seen > last[c]:
                            last[c] = seen
                sm_free[s] = f
                busy[s] += dur
                h += 1
                remaining -= 1
                progressed = True
            head[s] = h - q_ptr[s]
        if not progressed:
            break
    return remaining


COMPILED = numba is not None
_compiled = numba.njit(cache=True, nogil=True)(_list_schedule) if COMPILED else None


def csr(lists) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, flat) int64 arrays of a list of int lists."""
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    flat = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


def list_schedule(queues, needs, adds, gsize, own, rate, wb, trip_us, lat_us, compute, fixed,
                  hop, free_bytes, ring_bytes, hide=0.0, compiled: bool | None = None, pre_rate=None, chide=None,
                  gtail=None, hbusy=None, gscale=None):
    """(start, finish, preloaded, busy, tasks left) for the plan's queues and per-task terms. `queues`,
    `needs` and `adds` are CSR pairs (csr()); the per-task terms are float arrays. `hop`: how long
    after each task finishes its readers see it; `free_bytes`, `ring_bytes`: the weight bytes a task's
    ring takes in before the task before it signals, and in all; `hide`: the part of each task's time a
    wait of its SM for its inputs takes in (each per task, or a number for every task); `pre_rate`: how
    fast each task's ring loads while its SM waits (default `rate`); `chide`: the part of each task's
    compute path a wait takes in (default `hide`; never less); `gtail`: per wait group, how long past
    its last producer's signal its readers see it complete (default none); `hbusy` (per task) times
    `gscale` (per group): more of a task's hop as a group's readers see it (default none). `compiled`: None picks numba where
    it imports; False runs the same function as Python (the reference)."""
    n = len(own)
    nsm = len(queues[0]) - 1
    hop, free_bytes, ring_bytes, hide = (np.broadcast_to(np.asarray(a, dtype=np.float64), (n,))
                                         for a in (hop, free_bytes, ring_bytes, hide))
    pre_rate = rate if pre_rate is None else pre_rate
    chide = hide if chide is None else np.broadcast_to(np.asarray(chide, dtype=np.float64), (n,))
    gtail, gscale = (np.broadcast_to(np.asarray(d if a is None else a, dtype=np.float64), (len(gsize),))
                     for a, d in ((gtail, 0.0), (gscale, 1.0)))
    hbusy = np.broadcast_to(np.asarray(0.0 if hbusy is None else hbusy, dtype=np.float64), (n,))
    use = COMPILED if compiled is None else compiled
    if use and not COMPILED:
        raise RuntimeError("numba is not installed: pip install numba (or pass compiled=None)")
    if use:
        # one signature (C-contiguous, writable, int64 or float64), so numba's disk cache holds one build
        ints = [np.require(a, np.int64, ["C", "W"]) for a in (*queues, *needs, *adds, gsize)]
        floats = [np.require(a, np.float64, ["C", "W"])
                  for a in (own, rate, wb, trip_us, lat_us, compute, fixed, hop, free_bytes, ring_bytes, hide,
                            pre_rate, chide, gtail, hbusy, gscale)]
        start, finish, preloaded, busy = np.zeros(n), np.full(n, -1.0), np.zeros(n), np.zeros(nsm)
        left = _compiled(*ints, *floats, start, finish, preloaded, busy)
        return start, finish, preloaded, busy, int(left)
    lists = [a.tolist() if isinstance(a, np.ndarray) else list(a)
             for a in (*queues, *needs, *adds, gsize, own, rate, wb, trip_us, lat_us, compute, fixed, hop,
                       free_bytes, ring_bytes, hide, pre_rate, chide, gtail, hbusy, gscale)]
    start, finish, preloaded, busy = [0.0] * n, [-1.0] * n, [0.0] * n, [0.0] * nsm
    left = _list_schedule(*lists, start, finish, preloaded, busy)
    return (np.asarray(start), np.asarray(finish), np.asarray(preloaded), np.asarray(busy), left)


__all__ = ["list_schedule", "csr", "COMPILED"]
