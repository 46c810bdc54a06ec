"""Judging on a Ray cluster: LocalPool's interface and EvalResults, one actor per GPU.

    pool = RayPool("gpu")                         # RAY_ADDRESS if set, else a local Ray instance
    pool = RayPool("gpu", address="head:6379")    # an existing cluster (or ray://head:10001)
    results = pool.evaluate_many([(problem, candidate), ...], on_result=print)

Each actor holds the judges of one GPU (num_gpus=1; Ray sets CUDA_VISIBLE_DEVICES, so its judges
use device 0 of what they see): `slots_per_gpu` judges sharing one timing lock, as LocalPool
runs them. On the cpu backend an actor holds one judge and takes one CPU. Every node needs
megakernel_gym importable (installed, or a `runtime_env`).

What the driver (this process) does:
- backpressure: at most `in_flight` evaluations are queued on an actor; the rest wait here;
- results go to the results store here, as each arrives (the store is a SQLite file on this
  machine; an actor's judges keep only a private one, for the problems' baseline timings);
- an evaluation whose actor died (its node lost, the OOM killer, a crash) is retried on
  another actor up to `max_retries` times, then reported as a runtime_error of category
  `worker_lost`; the dead actor is replaced, and what was already evaluated is kept.
"""
from __future__ import annotations

import inspect
import logging
import os
import queue
import re
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megakernel_gym.rewards.judge import BACKENDS, Judge, version_of
from megakernel_gym.rewards.judge import judge_one, warm_all
from megakernel_gym.rewards.gpu_turns import GpuTurns, gpu_key
from megakernel_gym.rewards.problem import Candidate, Problem
from megakernel_gym.rewards.result import EvalResult
from megakernel_gym.rewards.store import ResultsStore, as_store

INSTALL_HINT = "pip install 'megakernel-gym[ray]'"
LOCAL_OBJECT_STORE_BYTES = 256 << 20   # problems, kernels and results are kilobytes


class RayPoolError(RuntimeError):
    """The Ray pool cannot run (no ray, no cluster at the address, no GPU in it); the message
    says what to change."""


def _ray():
    try:
        import ray
    except ImportError as e:
        raise RayPoolError(f"the Ray pool needs the ray package ({e}); {INSTALL_HINT}") from e
    return ray


# -- connecting ----------------------------------------------------------------------------
# A Ray connection a pool made (a local instance it started, or a cluster it joined) is shared
# by the pools of this process and shut down when the last of them closes; a Ray the user
# initialized is theirs to shut down.
_ours = {"users": 0}
_ours_lock = threading.Lock()


def _probe(address: str) -> tuple[str, int] | None:
    """(host, port) to check before handing the address to Ray, or None for "auto" (a cluster
    `ray start` left on this machine, found by Ray itself)."""
    if address == "auto":
        return None
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or "]" in port:
        host, port = rest, ""
    try:
        return host.strip("[]") or "127.0.0.1", int(port) if port else (10001 if "://" in address else 6379)
    except ValueError:
        raise RayPoolError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or auto; "
                           "fix --ray-address or RAY_ADDRESS") from None


def connect(address: str | None = None, timeout_s: float = 30.0, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray: `address`, else RAY_ADDRESS, else (or with "local") a new
    local instance; a Ray this process already joined is used as it is.
    Returns True when the caller shares a connection a pool made (give it back with release()).
    Raises RayPoolError, within about `timeout_s`, when no cluster answers."""
    ray = _ray()
    with _ours_lock:
        if ray.is_initialized():
            if _ours["users"]:
                _ours["users"] += 1
                return True
            return False
        address = address or os.environ.get("RAY_ADDRESS") or None
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # log_to_driver off: actors' prints would land on this process's stdout, where
        # `mkgym ... --json` promises exactly one JSON value
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        if address in (None, "local"):
            # in this thread: Ray ties the processes it starts to the thread that starts them
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, **quiet)
            _ours["users"] = 1
            return True
    target = _probe(address)
    if target is not None:
        try:
            socket.create_connection(target, timeout=min(timeout_s, 10.0)).close()
        except OSError as e:
            raise RayPoolError(f"no Ray cluster answers at {address!r} ({e}); start one (`ray start --head`), fix "
                               "--ray-address / RAY_ADDRESS, or leave both unset for a local Ray instance") from e
    # Ray retries a GCS that does not answer for minutes; a thread bounds the wait. Joining an
    # existing cluster starts no processes here, so the thread may end once connected.
    box: dict[str, Any] = {}

    def init():
        try:
            box["ok"] = ray.init(address=address, **quiet)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            box["error"] = e

    t = threading.Thread(target=init, daemon=True, name="mkgym-ray-connect")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise RayPoolError(f"the Ray cluster at {address!r} did not answer within {timeout_s:.0f} s (something listens "
                           "there, but not a Ray head?); check the address and port (ray://HOST:10001 for a "
                           "cluster on other machines)")
    if "error" in box:
        e = root = box["error"]
        while root.__cause__ is not None:   # Ray wraps the reason (e.g. a missing auth token) in its errors
            root = root.__cause__
        why = _short(e) if root is e else f"{_short(e)}; because {_short(root)}"
        raise RayPoolError(f"could not connect to the Ray cluster at {address!r}: {why}") from e
    with _ours_lock:
        _ours["users"] += 1
    return True


def release() -> None:
    """One user less of the Ray connection a pool made; the last one shuts it down (a cluster
    joined is left running: only this process leaves it)."""
    ray = _ray()
    with _ours_lock:
        if _ours["users"]:
            _ours["users"] -= 1
            if _ours["users"] == 0 and ray.is_initialized():
                ray.shutdown()


# -- the actor -----------------------------------------------------------------------------
_ACTOR_DIR = "mkgym-ray-actor-"


def _sweep_stale_actor_dirs() -> None:
    """A killed actor (ray.kill, its node lost and back) leaves its private store behind: remove
    those of this machine whose process is gone."""
    for d in Path(tempfile.gettempdir()).glob(f"{_ACTOR_DIR}*"):
        pid = d.name[len(_ACTOR_DIR):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:   # alive, someone else's
            pass


class JudgeActor:
    """Inside Ray: the judges of one GPU (or one CPU judge), one evaluation per judge at a time."""

    def __init__(self, backend: str, slots: int, slot_base: int, judge_kw: dict):
        import ray
        if backend == "gpu":
            ids = ray.get_gpu_ids()
            if ids and str(ids[0]).isdigit():   # pin workers to cores by physical GPU, as LocalPool does
                slot_base = int(ids[0]) * slots
        self.backend = backend
        # Baseline timings are cached per store: a private one here, or every evaluation would time
        # eager and torch.compile again. Results proper are stored, and served back, by the driver.
        _sweep_stale_actor_dirs()
        self.tmp = tempfile.mkdtemp(prefix=f"{_ACTOR_DIR}{os.getpid()}-")
        self.store = ResultsStore(os.path.join(self.tmp, "actor.sqlite"))
        # timing alone, other GPU work beside each other, with this actor's judges and every other process's on its GPU
        lock = GpuTurns(gpu_key(0) if backend == "gpu" else None)      # (rewards/gpu_turns.py)
        kw = {**judge_kw, "use_cache": False}
        self.judges = [Judge(backend, store=self.store, device_index=0, gpu_lock=lock, slot=slot_base + k, **kw)
                       for k in range(slots)]
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for j in self.judges:
            self.free.put(j)

    def warm(self) -> str:
        """Start every judge's workers; returns the device key results are stored under."""
        warm_all(self.judges)
        return self.judges[0]._device_key()

    def evaluate(self, problem: Problem, candidate: Candidate) -> tuple[EvalResult, str | None]:
        """The result, and the device key to store it under (None: not the judge's own result)."""
        judge = self.free.get()
        try:
            res, judged = judge_one(judge, problem, candidate, self.backend)
            return res, (judge._device_key() if judged else None)
        finally:
            self.free.put(judge)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        for j in self.judges:
            j.close()
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class _Actor:
    handle: Any
    ready: Any            # the warm() call while the actor starts; None once it takes evaluations
    born: float
    load: int = 0


class RayPool:
    """See the module docstring. `num_workers`: GPU actors (default: every GPU in the cluster),
    or CPU actors on the cpu backend (default: the cluster's CPUs, at most 8). Judge options
    (timeout_s, use_cache, timing, ...) go through to every judge."""

    def __init__(self, backend: str | None = None, num_workers: int | None = None,
                 store: ResultsStore | str | None | bool = None, address: str | None = None, slots_per_gpu: int = 4,
                 max_retries: int = 2, in_flight: int | None = None, connect_timeout_s: float = 30.0,
                 start_timeout_s: float = 600.0, runtime_env: dict | None = None, **judge_kw):
        if backend not in (None, "auto", *BACKENDS):
            raise ValueError(f"unknown backend {backend!r}; use one of: {', '.join(BACKENDS)} (or leave it out to "
                             "pick gpu when the Ray cluster has GPUs)")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        try:   # a misspelt option fails here, not in every actor
            inspect.signature(Judge).bind_partial(**judge_kw)
        except TypeError as e:
            raise TypeError(f"RayPool passes options it does not take to Judge, and Judge {e}") from None
        ray = _ray()
        local_cpus = None if backend == "gpu" else max(os.cpu_count() or 1, num_workers or 0)
        self._actors: list[_Actor] = []
        self._shares_ray = connect(address, connect_timeout_s, num_cpus=local_cpus)
        try:
            self.backend, n = self._plan(ray, backend, num_workers, address)
            self.slots = slots_per_gpu if self.backend == "gpu" else 1
            self.in_flight = in_flight or self.slots + 1   # one queued per actor hides the round trip
            self.max_retries = max_retries
            self.start_timeout_s = start_timeout_s
            self.store = as_store(store)
            self.use_cache = judge_kw.get("use_cache", True)
            # the actors' judges' identity (rewards/version.py), which the store's cached verdicts must carry
            self.version = version_of(self.backend, judge_kw)
            self._judge_kw = judge_kw
            opts: dict[str, Any] = {"max_concurrency": self.slots + 2, "max_restarts": 0}
            opts.update({"num_gpus": 1} if self.backend == "gpu" else {"num_cpus": 1})
            if runtime_env:
                opts["runtime_env"] = runtime_env
            self._cls = ray.remote(JudgeActor).options(**opts)
            self._device_keys: set[str] = set()
            self._start_errors: list[str] = []
            self._current: dict[int, Any] = {}   # item -> actor handle, while evaluate_many runs
            self.stats = {"retries": 0, "actors_replaced": 0, "worker_lost": 0}
            self._actors = [self._spawn(i) for i in range(n)]
        except BaseException:
            self.close()   # a half-made pool gives back its actors and its share of the local Ray
            raise

    def _plan(self, ray, backend: str | None, num_workers: int | None, address: str | None) -> tuple[str, int]:
        """The backend and the number of actors, checked against what the cluster has."""
        res = ray.cluster_resources()
        gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
        address = address or os.environ.get("RAY_ADDRESS")
        where = f"the Ray cluster at {address!r}" if address else "the Ray instance of this process"
        if backend in (None, "auto"):
            backend = "gpu" if gpus else "cpu"
        if backend == "gpu":
            if not gpus:
                raise RayPoolError(f"backend 'gpu' puts one actor on each GPU, and {where} has no GPUs (resources: "
                                   f"{cpus} CPUs); add GPU nodes, or use backend 'cpu' for correctness checks")
            n = num_workers or gpus
            if n > gpus:
                raise RayPoolError(f"{n} GPU actors asked for, and {where} has {gpus} GPU(s); ask for at most {gpus}")
        else:
            n = num_workers or max(1, min(cpus, 8))
            if n > cpus:
                raise RayPoolError(f"{n} CPU actors asked for, and {where} has {cpus} CPU(s); ask for at most {cpus}")
        unit = "GPU" if backend == "gpu" else "CPU"
        free = int(ray.available_resources().get(unit, 0))
        if free < n:
            logging.getLogger(__name__).warning(
                "%d %s actor(s) asked for and %d %s(s) free in %s now: the others start as %ss free up, or are "
                "given up after start_timeout_s", n, unit, free, unit, where, unit)
        return backend, n

    def _spawn(self, index: int) -> _Actor:
        handle = self._cls.remote(self.backend, self.slots, index * self.slots, self._judge_kw)
        return _Actor(handle, handle.warm.remote(), time.monotonic())

    # -- the LocalPool interface ----------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._actors) * self.slots

    @property
    def actors(self) -> list:
        """The actor handles now serving or starting (for monitoring, and tests that kill one)."""
        return [a.handle for a in self._actors]

    def actor_for(self, item: int):
        """The actor evaluating item `item` of the running evaluate_many call, or None."""
        return self._current.get(item)

    def warm(self) -> None:
        """Wait until every actor has started its judges. Raises RayPoolError when none could."""
        self._wait_started()
        if not self._actors:
            raise RayPoolError(self._why_none())

    def _wait_started(self, first_only: bool = False) -> None:
        """Until every actor (or, with first_only, one) has started or given up."""
        ray = _ray()
        while any(a.ready is not None for a in self._actors) and not (first_only and self._device_keys):
            starting = {a.ready: a for a in self._actors if a.ready is not None}
            done, _ = ray.wait(list(starting), num_returns=1, timeout=1.0)
            for ref in done:
                self._started(starting[ref], ref)
            self._expire_starting()

    def evaluate(self, problem: Problem, candidate: Candidate | str) -> EvalResult:
        return self.evaluate_many([(problem, candidate)])[0]

    def evaluate_many(self, items: Sequence[tuple[Problem, Candidate | str]],
                      on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """Evaluate on the cluster. Results come back in input order; each is written to the store
        and passed to `on_result` as it arrives."""
        ray = _ray()
        lost = _lost_errors(ray)
        jobs = [(p, c if isinstance(c, Candidate) else Candidate(c)) for p, c in items]
        results: list[EvalResult | None] = [None] * len(jobs)
        tries = [0] * len(jobs)

        def finish(i: int, res: EvalResult, device_key: str | None) -> None:
            if device_key and self.store is not None:
                self.store.record(res, device_key, source=jobs[i][1].source)
            results[i] = res
            if on_result:
                on_result(i, res)

        if self.store is not None and self.use_cache:
            self._wait_started(first_only=True)   # the device key, without which the store cannot be asked
        todo: deque[int] = deque()
        for i, (p, c) in enumerate(jobs):
            hit = self._cached(p, c)
            if hit is not None:
                finish(i, hit, None)
            else:
                todo.append(i)
        running: dict[Any, tuple[int, _Actor]] = {}
        try:
            while todo or running:
                self._dispatch(todo, running, jobs)
                starting = {a.ready: a for a in self._actors if a.ready is not None}
                if not running and not starting:
                    why = self._why_none()
                    while todo:
                        i = todo.popleft()
                        finish(i, self._failure(jobs[i], why, "judge"), None)
                    break
                done, _ = ray.wait([*running, *starting], num_returns=1, timeout=1.0 if starting else None)
                for ref in done:
                    if ref in starting:
                        self._started(starting[ref], ref)
                        continue
                    i, actor = running.pop(ref)
                    actor.load -= 1
                    self._current.pop(i, None)
                    try:
                        res, key = ray.get(ref)
                    except lost as e:
                        self._replace(actor)
                        tries[i] += 1
                        if tries[i] <= self.max_retries:
                            self.stats["retries"] += 1
                            todo.appendleft(i)
                            continue
                        self.stats["worker_lost"] += 1
                        res, key = self._failure(jobs[i], f"the judge actor evaluating it was lost {tries[i]} time(s) "
                                                 f"({_short(e)}); gave up after {self.max_retries} retr"
                                                 f"{'y' if self.max_retries == 1 else 'ies'}", "worker_lost"), None
                    except ray.exceptions.RayError as e:   # the call itself failed; the actor lives on
                        res, key = self._failure(jobs[i], f"judge error: {_short(e)}", "judge"), None
                    finish(i, res, key)
                self._expire_starting()
        finally:
            self._current.clear()
            for _, actor in running.values():   # left behind by an interrupt: free the actors' slots
                actor.load -= 1
        return results  # type: ignore[return-value]

    def close(self) -> None:
        ray = _ray()
        if ray.is_initialized():
            stops = [a.handle.close.remote() for a in self._actors]
            if stops:
                ray.wait(stops, num_returns=len(stops), timeout=10.0)
            for a in self._actors:
                _kill(ray, a.handle)
        self._actors = []
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the parts ------------------------------------------------------------------------
    def _release(self) -> None:
        if self._shares_ray:
            self._shares_ray = False
            release()

    def _cached(self, problem: Problem, cand: Candidate) -> EvalResult | None:
        """The store's result for this kernel, as a judge would serve it. Only once the actors'
        device is known, and only when they all have the same one."""
        if self.store is None or not self.use_cache or len(self._device_keys) != 1:
            return None
        t0 = time.perf_counter()
        hit = self.store.get(problem.sha256, cand.sha256, next(iter(self._device_keys)), self.version)
        if hit is not None:
            hit.elapsed_s = round(time.perf_counter() - t0, 4)
        return hit

    def _dispatch(self, todo: deque, running: dict, jobs: list) -> None:
        """Hand waiting items to the least loaded serving actors, up to `in_flight` each."""
        while todo:
            open_ = [a for a in self._actors if a.ready is None and a.load < self.in_flight]
            if not open_:
                return
            actor = min(open_, key=lambda a: a.load)
            i = todo.popleft()
            running[actor.handle.evaluate.remote(*jobs[i])] = (i, actor)
            actor.load += 1
            self._current[i] = actor.handle

    def _started(self, actor: _Actor, ref) -> None:
        ray = _ray()
        try:
            self._device_keys.add(ray.get(ref))
            actor.ready = None
        except ray.exceptions.RayError as e:
            self._drop(actor, f"a judge actor failed to start: {_short(e)}")

    def _expire_starting(self) -> None:
        now = time.monotonic()
        for a in [a for a in self._actors if a.ready is not None and now - a.born > self.start_timeout_s]:
            self._drop(a, f"a judge actor did not start within {self.start_timeout_s:.0f} s (no free "
                          f"{'GPU' if self.backend == 'gpu' else 'CPU'} for it in the cluster?)")

    def _drop(self, actor: _Actor, why: str) -> None:
        _kill(_ray(), actor.handle)
        if actor in self._actors:
            self._actors.remove(actor)
        self._start_errors.append(why)
        logging.getLogger(__name__).warning("%s", why)

    def _replace(self, actor: _Actor) -> None:
        """A new actor in a dead one's place (once, however many of its evaluations report it)."""
        if actor not in self._actors:
            return
        _kill(_ray(), actor.handle)
        k = self._actors.index(actor)
        self._actors[k] = self._spawn(k)
        self.stats["actors_replaced"] += 1

    def _why_none(self) -> str:
        last = self._start_errors[-1] if self._start_errors else "all actors were closed"
        return f"no judge actor is running: {last}"

    def _failure(self, job: tuple[Problem, Candidate], reason: str, category: str) -> EvalResult:
        problem, cand = job
        return EvalResult.failure("runtime_error", reason, problem, cand.sha256, self.backend, category=category)


def _lost_errors(ray) -> tuple[type, ...]:
    """Errors that say the actor (or its node, or the result's copy) is gone, not the call wrong."""
    ex = ray.exceptions
    return (ex.RayActorError, ex.WorkerCrashedError, ex.ObjectLostError, ex.NodeDiedError, ex.LocalRayletDiedError)


def _kill(ray, handle) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _short(e: BaseException, limit: int = 400) -> str:
    """One line: Ray's errors carry the remote traceback, whose last line is the cause."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() if ln.strip()]
    if len(lines) < 2:
        text = (lines or [""])[0]
        return f"{type(e).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"
    head = lines[0][:limit // 3]
    return f"{type(e).__name__}: {head}{'...' if len(lines[0]) > len(head) else ''} | {lines[-1][:limit]}"


__all__ = ["RayPool", "RayPoolError", "JudgeActor", "connect", "release", "INSTALL_HINT"]
