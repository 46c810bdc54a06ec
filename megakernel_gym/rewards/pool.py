"""Worker pools: many evaluations at once behind one small interface.

`LocalPool` runs one Judge (a reference and a candidate worker) per slot: one slot per GPU
on the gpu backend, one per CPU core (up to `max_workers`) on the cpu backend. GPU timing
on a device is exclusive because each GPU has exactly one slot. The Ray pool (its own
issue) implements the same `evaluate_many`.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from megakernel_gym.rewards.judge import Judge, resolve_backend
from megakernel_gym.rewards.problem import Candidate, Problem, ProblemError
from megakernel_gym.rewards.result import EvalResult
from megakernel_gym.rewards.store import ResultsStore


class Pool(Protocol):
    backend: str

    def evaluate_many(self, items: Sequence[tuple[Problem, Candidate | str]],
                      on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]: ...

    def close(self) -> None: ...


class LocalPool:
    def __init__(self, backend: str | None = None, num_workers: int | None = None,
                 store: ResultsStore | str | None | bool = None, **judge_kw):
        self.backend = resolve_backend(backend)
        if num_workers is None:
            if self.backend == "gpu":
                import torch
                num_workers = torch.cuda.device_count()
            else:
                num_workers = max(1, min(os.cpu_count() or 1, 8))
        if not isinstance(store, ResultsStore) and store is not False:
            store = ResultsStore(store)
        self.store = store if store is not False else None
        self.judges = [Judge(self.backend, store=self.store if self.store else False,
                             device_index=i if self.backend == "gpu" else 0, **judge_kw)
                       for i in range(num_workers)]

    @property
    def size(self) -> int:
        return len(self.judges)

    def evaluate(self, problem: Problem, candidate: Candidate | str) -> EvalResult:
        return self.evaluate_many([(problem, candidate)])[0]

    def evaluate_many(self, items, on_result=None) -> list[EvalResult]:
        """Evaluate concurrently, one thread per slot. Results come back in input order; each is
        written to the store as it finishes. A broken problem gives a runtime_error result."""
        items = list(items)
        results: list[EvalResult | None] = [None] * len(items)
        work: queue.Queue = queue.Queue()
        for i, it in enumerate(items):
            work.put(i)

        def run(judge: Judge):
            while True:
                try:
                    i = work.get_nowait()
                except queue.Empty:
                    return
                problem, cand = items[i]
                try:
                    res = judge.evaluate(problem, cand)
                except ProblemError as e:
                    c = cand if isinstance(cand, Candidate) else Candidate(cand)
                    res = EvalResult.failure("runtime_error", f"problem error: {e}", problem, c.sha256,
                                             self.backend, category="problem")
                results[i] = res
                if on_result:
                    on_result(i, res)

        threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in self.judges]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for j in self.judges:
            j.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
