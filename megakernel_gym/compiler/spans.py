"""Flat element spans and their overlaps: how the lowering finds which tasks' regions meet (the task
graph's dependencies) without comparing every pair. _Spans keeps one side's spans per task; _overlap_pairs
lists the meeting (query task, found task) pairs from sorted bounds, a chunk at a time; sorted_unique and
split_pair_keys handle the pairs as int64 keys. Moved from tasks.py, unchanged (issue 42).
"""
from __future__ import annotations

import sys

import numpy as np

Intervals = tuple[tuple[int, int], ...]   # sorted, disjoint [lo, hi) flat element ranges


def _overlap_bound(query: "_Spans", found: "_Spans") -> tuple[int, int]:
    """(overlapping span pairs, a bound on the task pairs among them): what _overlap_pairs compares
    and what it returns at most. Each span pair counted from sorted bounds, without building one: a
    found span misses a query span when it ends at or before the query's start or starts at or
    after its end (never both, spans being non-empty); no more task pairs than tasks on each side."""
    qlo, qhi, _ = query.arrays()
    lo, hi = found.sorted_bounds()
    if not len(lo) or not len(qlo):
        return 0, 0
    before = np.searchsorted(hi, qlo, side="right")
    after = len(lo) - np.searchsorted(lo, qhi, side="left")
    pairs = int(len(qlo) * len(lo) - int(before.sum()) - int(after.sum()))
    return pairs, min(pairs, query.task_count() * found.task_count())


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """np.unique of int64 keys that come nearly in order (pairs of task ids, the first ascending): a
    stable sort (timsort) and a mask took 1 ms where np.unique's hash took 40 on a 1B decoder's 308k
    dependencies. Sorts `keys` in place (the caller's array: one fewer copy of a plan's millions)."""
    if not len(keys):
        return keys
    keys.sort(kind="stable")
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


_HI, _LO = (1, 0) if sys.byteorder == "little" else (0, 1)


def split_pair_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key >> 32, key & 0xffffffff) of non-negative int64 keys below 2**63, as int32 views of the
    keys' own memory (task ids are far below 2**31): no division and no new array."""
    halves = keys.view(np.int32).reshape(-1, 2)
    return halves[:, _HI], halves[:, _LO]


class _Spans:
    """The flat [lo, hi) spans of the regions a set of tasks touched in one tensor, each with its
    task, as numpy arrays (built again only after new spans came in)."""

    def __init__(self):
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.tid: list[int] = []
        self._arrays = None
        self._sorted = None

    def add(self, spans: Intervals, tid: int) -> None:
        for lo, hi in spans:
            self.lo.append(lo)
            self.hi.append(hi)
            self.tid.append(tid)
        self._arrays = None

    def extend(self, other: "_Spans") -> None:
        self.lo += other.lo
        self.hi += other.hi
        self.tid += other.tid
        self._arrays = None

    def task_count(self) -> int:
        """How many tasks the spans belong to (a task's spans come one after another)."""
        return self._tasks()[0]

    def several_per_task(self) -> bool:
        """Whether some task has more than one span here (so a pair of tasks may overlap twice)."""
        return self._tasks()[1]

    def _tasks(self) -> tuple[int, bool]:
        arrays = self.arrays()
        kept = self.__dict__.get("_task_facts")
        if kept is None or kept[0] is not arrays:
            tid = arrays[2]
            new = int(np.count_nonzero(tid[1:] != tid[:-1])) + 1 if len(tid) else 0
            kept = self._task_facts = (arrays, (new, new < len(tid)))
        return kept[1]

    def sorted_bounds(self):
        """The spans' starts and ends, each sorted on its own (what _overlap_bound searches)."""
        by_start = self.by_start()
        return by_start[1], by_start[3]

    def by_start(self):
        """(order, starts, ends in that order, ends sorted): the spans ordered by start, then end."""
        arrays = self.arrays()
        kept = self.__dict__.get("_sorted")
        if kept is None or kept[0] is not arrays:
            lo, hi, _ = arrays
            order = np.lexsort((hi, lo))
            kept = self._sorted = (arrays, (order, lo[order], hi[order], np.sort(hi)))
        return kept[1]

    def arrays(self):
        if self._arrays is None:
            self._arrays = (np.asarray(self.lo, dtype=np.int64), np.asarray(self.hi, dtype=np.int64),
                            np.asarray(self.tid, dtype=np.int64))
        return self._arrays


_PAIR_CHUNK = 1 << 20    # span pairs built at once (then each task pair kept once)


def _overlap_pairs(query: _Spans, found: _Spans) -> np.ndarray:
    """(query task, found task) per pair of tasks with overlapping spans, as one int64 array of pairs
    (where a task has several spans, each pair once within each chunk of _PAIR_CHUNK span pairs). Where
    the found spans ordered by start have their ends in order too (the tiles of one op; spans read
    whole by every task), the spans a query span overlaps are one run of that order, found by two
    binary searches: time and memory in the pairs, not in the product of the spans."""
    qlo, qhi, qtid = query.arrays()
    lo, hi, tid = found.arrays()
    if not len(lo) or not len(qlo):
        return np.empty((0, 2), dtype=np.int64)
    dedupe = query.several_per_task() or found.several_per_task()
    width = int(tid.max()) + 1
    out = []

    def keep(pq: np.ndarray, pf: np.ndarray) -> None:
        if dedupe and len(pq) > 1:
            keys = np.unique(pq * width + pf)
            pq, pf = keys // width, keys % width
        out.append(np.stack([pq, pf], axis=1))
    order, slo, shi, _ = found.by_start()
    if len(shi) < 2 or bool((shi[1:] >= shi[:-1]).all()):
        first = np.searchsorted(shi, qlo, side="right")    # ends past the query's start: from here on
        count = np.maximum(np.searchsorted(slo, qhi, side="left") - first, 0)   # starts before its end
        ends = np.cumsum(count)
        a = 0
        while a < len(qlo):
            b = max(a + 1, int(np.searchsorted(ends, (int(ends[a - 1]) if a else 0) + _PAIR_CHUNK, side="right")))
            c = count[a:b]
            total = int(c.sum())
            qi = np.repeat(np.arange(a, b, dtype=np.int64), c)
            at = np.repeat(first[a:b] - (np.cumsum(c) - c), c) + np.arange(total, dtype=np.int64)
            keep(qtid[qi], tid[order[at]])
            a = b
    else:
        step = max(1, 4_000_000 // len(lo))            # bound the overlap matrix's size
        for a in range(0, len(qlo), step):
            hit = (qlo[a:a + step, None] < hi[None, :]) & (lo[None, :] < qhi[a:a + step, None])
            qi, fi = np.nonzero(hit)
            keep(qtid[a + qi], tid[fi])
    return np.concatenate(out) if len(out) > 1 else out[0]
