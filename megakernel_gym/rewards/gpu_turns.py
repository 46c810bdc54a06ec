"""Turns on one GPU for the judges that share it (a LocalPool's slots, a Ray actor's): timing holds it alone,
running code on it holds it beside the others.

Timing (a candidate's timed calls, a problem's baselines) takes the GPU exclusively, and so does nothing else:
every other use of it by a judge's workers (a candidate's checked calls, the reference's outputs and compares,
compiling the baselines) takes a shared turn, which waits while a timing runs or waits. Red team 19: the checked
calls ran outside the lock while another slot timed its candidate or a problem's baselines, so a candidate whose
checked calls kept every SM busy for seconds slowed its GRPO siblings' timings (raising its own advantage) and
could leave slow baselines in the store for good; an honest candidate's checks did the same, as noise.
A plain threading.Lock still works where a judge is given one (no shared turns: the old overlap).
"""
from __future__ import annotations

import contextlib
import threading


class GpuTurns:
    """A writer-preferring reader-writer lock: `with turns:` is the exclusive turn (timing), `with turns.shared():`
    a shared one. A thread holding the exclusive turn passes through shared() (its own timing's compares)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._owner: int | None = None
        self._waiting = 0

    def __enter__(self):
        me = threading.get_ident()
        with self._cond:
            self._waiting += 1
            try:
                while self._owner is not None or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._owner = me
        return self

    def __exit__(self, *exc):
        with self._cond:
            self._owner = None
            self._cond.notify_all()

    def acquire(self) -> bool:       # threading.Lock's names, for callers that hold it by hand
        self.__enter__()
        return True

    def release(self) -> None:
        self.__exit__(None, None, None)

    @contextlib.contextmanager
    def shared(self):
        me = threading.get_ident()
        if self._owner == me:
            yield
            return
        with self._cond:
            while self._owner is not None or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()


def shared_turn(lock):
    """A shared turn of `lock` (GpuTurns), or nothing for a plain lock."""
    return lock.shared() if isinstance(lock, GpuTurns) else contextlib.nullcontext()
