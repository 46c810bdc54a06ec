"""Turns on one GPU for the judges that share it (a LocalPool's slots, a Ray actor's): timing holds it alone,
running code on it holds it beside the others.

Timing (a candidate's timed calls, a problem's baselines) takes the GPU exclusively, and so does nothing else:
every other use of it by a judge's workers (a candidate's checked calls, the reference's outputs and compares,
compiling the baselines) takes a shared turn, which waits while a timing runs or waits. Red team 19: the checked
calls ran outside the lock while another slot timed its candidate or a problem's baselines, so a candidate whose
checked calls kept every SM busy for seconds slowed its GRPO siblings' timings (raising its own advantage) and
could leave slow baselines in the store for good; an honest candidate's checks did the same, as noise.
A plain threading.Lock still works where a judge is given one (no shared turns: the old overlap).

Across processes the same turns are file locks (flock) on the GPU's own files in /dev/shm: judges in other
processes on one GPU (environments each with a judge of its own, a judge server beside a training run, the
level-5 MegakernelJudge's worker) took no turns with each other at all, and one's timing ran beside another's
checked calls or timing. A timing holds an "intent" file exclusively while it waits and runs, and the GPU's file
exclusively; a shared turn passes through the intent file (so a timing waiting holds new shared turns back, as
in-process) and holds the GPU's file shared. A candidate's worker cannot hold them: its /dev/shm holds its own
folder alone (rewards/isolation.minimal_dev).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import warnings

TURNS_DIR = "/dev/shm/megakernel-gym-turns"


def gpu_key(device_index: int = 0) -> str:
    """The GPU a process's CUDA device `device_index` is, as every process on the host names it: its entry in
    CUDA_VISIBLE_DEVICES (an index or a UUID, as the launcher gave it) where that is set, else the index."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    name = visible[device_index] if device_index < len(visible) else str(device_index)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:100]


class _TurnFiles:
    """The cross-process half of a GpuTurns: flock on two files per GPU. Each turn opens its own descriptors
    (flock locks belong to an open file, so two turns of one process are two holders, as two processes' are)."""

    def __init__(self, key: str, folder: str = TURNS_DIR):
        os.makedirs(folder, mode=0o777, exist_ok=True)
        self.intent, self.gpu = (os.path.join(folder, f"gpu-{key}.{part}") for part in ("intent", "turn"))

    @staticmethod
    def _open(path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def exclusive(self) -> tuple[int, ...]:
        fds: list[int] = []
        try:
            for path in (self.intent, self.gpu):
                fds.append(self._open(path))
                fcntl.flock(fds[-1], fcntl.LOCK_EX)
        except BaseException:
            self.release(tuple(fds))
            raise
        return tuple(fds)

    def shared(self) -> tuple[int, ...]:
        fds: list[int] = []
        try:
            intent = self._open(self.intent)
            fds.append(intent)
            fcntl.flock(intent, fcntl.LOCK_SH)        # waits while a timing waits or runs
            fds.append(self._open(self.gpu))
            fcntl.flock(fds[-1], fcntl.LOCK_SH)
            os.close(fds.pop(0))                      # through the intent: a timing that comes now waits for us alone
        except BaseException:
            self.release(tuple(fds))
            raise
        return tuple(fds)

    @staticmethod
    def release(fds: tuple[int, ...]) -> None:
        for fd in reversed(fds):
            os.close(fd)                              # closing the last descriptor of an open file drops its lock


class GpuTurns:
    """A writer-preferring reader-writer lock: `with turns:` is the exclusive turn (timing), `with turns.shared():`
    a shared one. A thread holding the exclusive turn passes through shared() (its own timing's compares).
    With a `device` (gpu_key) the turns are taken across processes too, after this process's own."""

    def __init__(self, device: str | None = None, folder: str = TURNS_DIR):
        self._cond = threading.Condition()
        self._shared = 0
        self._owner: int | None = None
        self._waiting = 0
        self.device = device
        self._files = None
        if device is not None:
            try:
                self._files = _TurnFiles(device, folder)
            except OSError as e:     # a host without a writable /dev/shm: this process's turns only, said once
                warnings.warn(f"GPU turns with other processes are off ({e}); judges in this process still take "
                              "turns with each other", stacklevel=2)
        self._held: tuple[int, ...] = ()

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
        if self._files is not None:
            try:
                self._held = self._files.exclusive()
            except BaseException:
                self._leave()
                raise
        return self

    def __exit__(self, *exc):
        held, self._held = self._held, ()
        if held:
            _TurnFiles.release(held)
        self._leave()

    def _leave(self) -> None:
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
        held: tuple[int, ...] = ()
        try:
            if self._files is not None:
                held = self._files.shared()
            yield
        finally:
            if held:
                _TurnFiles.release(held)
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()


def shared_turn(lock):
    """A shared turn of `lock` (GpuTurns), or nothing for a plain lock."""
    return lock.shared() if isinstance(lock, GpuTurns) else contextlib.nullcontext()
