"""The judge's side of a worker process: start, call with a hard timeout, kill, replace."""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
import weakref
from typing import Any

from megakernel_gym.rewards import sandbox

_live: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:
    for w in list(_live):
        w.kill()


_warned: set[str] = set()


def _warn_missing_layers(role: str, missing: list) -> None:
    """A candidate worker that runs without one of its isolation layers (rewards/isolation.py: no
    libseccomp, an old kernel, not root) still judges, and says so once per process and layer."""
    for layer in missing:
        key = f"{role}: {layer}"
        if role == "candidate" and key not in _warned:
            _warned.add(key)
            warnings.warn(f"the candidate worker runs without this isolation layer: {layer}", RuntimeWarning,
                          stacklevel=3)


_START_LOCK = threading.Lock()


def start_process(proc: mp.process.BaseProcess) -> None:
    """proc.start() for a spawned worker, without the user's `__main__` in the child. Spawn re-runs the
    parent's main script (or module, under `python -m`) in the child to find what it defines; a plain
    script that calls the env at its top level, with no `if __name__ == "__main__":`, would then start
    the env again in every worker (which fails). Our workers' targets and arguments are the package's
    own functions and plain values, so the child needs nothing of `__main__`: its file and spec are
    hidden from multiprocessing while it writes the child's preparation data (under a lock: pools start
    workers from threads)."""
    main = sys.modules.get("__main__")
    with _START_LOCK:
        hidden = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
        try:
            if "__spec__" in hidden:
                main.__spec__ = None
            proc.start()
        finally:
            if main is not None:
                main.__dict__.update(hidden)


class WorkerTimeout(RuntimeError):
    pass


class WorkerDied(RuntimeError):
    def __init__(self, message: str, exitcode: int | None):
        super().__init__(message)
        self.exitcode = exitcode


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process was killed by {name}"
    return f"the worker process exited with code {code}"


class WorkerProcess:
    """One spawned process in one role (`reference` or `candidate`) on one device."""

    def __init__(self, role: str, backend: str, device_index: int = 0, drop_privileges: bool = True,
                 start_timeout: float = 180.0, hide: list[str] | None = None, slot: int = 0):
        self.hide = [str(h) for h in (hide or [])]
        self.slot = slot
        self.role, self.backend, self.device_index = role, backend, device_index
        self.drop_privileges = drop_privileges
        self.start_timeout = start_timeout
        self.proc = None
        self.conn = None
        self.info: dict[str, Any] = {}
        self._log_offset = 0
        self.workdir = ""
        self._ready = False     # its start-up answer read (a judge's spare is spawned and read later: ensure)
        _live.add(self)

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the process without waiting for it (torch's import takes seconds)."""
        ctx = mp.get_context("spawn")
        # in RAM where there is a tmpfs: candidate outputs pass through here on every evaluation
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.workdir = tempfile.mkdtemp(prefix=f"mkgym-{self.role}-", dir=shm)
        os.chmod(self.workdir, 0o700)
        self.log_path = os.path.join(self.workdir, "worker.log")
        self._log_offset = 0
        parent, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=sandbox.worker_main, name=f"mkgym-{self.role}",
                                args=(child, self.role, self.backend, self.device_index, self.log_path,
                                      self.workdir, self.drop_privileges, self.hide, self.slot))
        self._spawned_at = time.perf_counter()
        self._ready = False
        start_process(self.proc)
        child.close()
        self.conn = parent

    def wait_ready(self) -> dict[str, Any]:
        try:
            header = self._receive(self.start_timeout)
        except (WorkerTimeout, WorkerDied) as e:
            tail = self.log_tail()
            self.kill()
            raise RuntimeError(f"{self.role} worker failed to start: {e}\n{tail}") from e
        if not header.get("ok"):
            self.kill()
            raise RuntimeError(f"{self.role} worker failed to start:\n{header.get('message', '')}")
        # where a start's seconds go (issue 41: `mkgym judge` spends most of its time here): the worker
        # times its own phases (sandbox.worker_main); the rest is the interpreter's start and imports
        header["startup_s"] = dict(header.get("startup_s") or {},
                                   spawn_to_ready=round(time.perf_counter() - self._spawned_at, 3))
        self.info = header
        self._ready = True
        _warn_missing_layers(self.role, header.get("isolation_missing") or [])
        return header

    @property
    def channel(self) -> str:
        """Where this (candidate) worker writes its outputs for the reference worker to read."""
        return os.path.join(self.workdir, "out")

    def clear_channel(self, start: bool = True) -> None:
        """Remove the channel's files; start=False: only where the worker's folder exists now (no worker
        is started for it). The candidate owns its folder: a channel it replaced with a link (to another
        slot's channel, to the store's folder) is not followed; the worker is killed instead, and the
        next command starts a fresh one in a new folder."""
        if start:
            self.ensure()
        elif not self.workdir or not os.path.lexists(self.channel):
            return
        try:
            fd = os.open(self.channel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:   # ELOOP or ENOTDIR: not the folder the judge made
            self.kill()
            return
        try:
            for name in os.listdir(fd):
                try:
                    os.unlink(name, dir_fd=fd)
                except IsADirectoryError:
                    self.kill()    # the judge makes no folders there: the candidate's, holding host memory
                    return
                except OSError:
                    pass
        finally:
            os.close(fd)

    def folder_bytes(self, most_entries: int = 100_000) -> int:
        """The bytes the worker's folder holds in the host's memory (/dev/shm: tmpfs pages), links not
        followed; past `most_entries` files, reported as unbounded."""
        if not self.workdir:
            return 0
        total, seen, stack = 0, 0, [self.workdir]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        seen += 1
                        if seen > most_entries:
                            return 1 << 62
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
            except OSError:
                continue
        return total

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def ensure(self) -> None:
        if not self.alive:
            self.kill()
            self.start()
        elif not self._ready:       # spawned in the background (a judge's spare): its start-up answer is read now
            self.wait_ready()

    def kill(self) -> None:
        self._ready = False
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(timeout=10)
            self.proc = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = ""

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        if self.alive and self.conn is not None:
            try:
                sandbox.send(self.conn, {"cmd": "exit"})
                self.proc.join(timeout=5)
            except (OSError, ValueError):
                pass
        self.kill()

    # -- calls ---------------------------------------------------------------------------
    def _receive(self, timeout: float) -> dict:
        if not self.conn.poll(timeout):
            if self.proc is not None and not self.proc.is_alive():
                raise WorkerDied(describe_exit(self.proc.exitcode), self.proc.exitcode)
            raise WorkerTimeout(f"no answer within {timeout:.0f} s")
        try:
            return sandbox.recv(self.conn)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            if self.proc is not None:
                self.proc.join(timeout=5)
            code = self.proc.exitcode if self.proc is not None else None
            raise WorkerDied(describe_exit(code), code) from None
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise WorkerDied(f"the worker broke the message protocol ({e})", None) from e

    def call(self, message: dict, timeout: float = 60.0) -> dict:
        """Send one command and wait at most `timeout` s for the answer. On a hang or death the
        process is killed (the caller restarts it) and WorkerTimeout / WorkerDied is raised."""
        self.ensure()
        try:
            sandbox.send(self.conn, message)
        except (OSError, ValueError) as e:
            self.kill()
            raise WorkerDied(f"the worker could not take the request ({e})", None) from e
        try:
            return self._receive(timeout)
        except (WorkerTimeout, WorkerDied):
            self.kill_process_only()
            raise

    def kill_process_only(self) -> None:
        """Kill the process but keep the log for the caller to read."""
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=10)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                # the last `limit` bytes past what was read before: a candidate that prints gigabytes
                # costs the judge's process no more than that
                end = f.seek(0, os.SEEK_END)
                f.seek(max(self._log_offset, end - 4 * limit))
                data = f.read(4 * limit)
                self._log_offset = end
        except (OSError, AttributeError):
            return ""
        text = data.decode(errors="replace")
        return text[-limit:]
