"""The judge: one candidate in, one EvalResult out.

    static checks (AST, here) -> candidate run on 5 fixed seeds + 1 secret (candidate worker)
    -> comparison with the references (reference worker) -> GPU, holding the device: profile,
    timing, baselines -> re-check of timed outputs, speedups, sanity -> results store

The judge process itself never runs problem or candidate code, and never holds their tensors.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

from megakernel_gym.cache_paths import judge_run_dirs
from megakernel_gym.rewards import anticheat
from megakernel_gym.rewards.admission import GpuMemory, gpu_need, host_need, measured_need
from megakernel_gym.rewards.worker_env import output_cap
from megakernel_gym.rewards.correctness import TRANSFORMS, _allowed_transforms, compare  # noqa: F401  (re-exported)
from megakernel_gym.rewards.problem import (MAX_CANDIDATE_CHARS, Candidate, Problem, ProblemError, ProblemTrivial,
                                             ProblemUnservable, lone_surrogate)
from megakernel_gym.rewards.result import EvalResult, Flag
from megakernel_gym.rewards.store import ResultsStore, as_store
from megakernel_gym.rewards.gpu_turns import GpuTurns, gpu_key, shared_turn
from megakernel_gym.rewards.trusted import is_trusted
from megakernel_gym.rewards.version import judge_version
from megakernel_gym.rewards.sandbox import timed_spec
from megakernel_gym.rewards.workers import WorkerDied, WorkerProcess, WorkerTimeout

BACKENDS = ("cpu", "gpu")
FIXED_SEEDS = (11, 23, 37, 41, 53)
INIT_SEED = 42
# Input distributions per fixed seed: plain randn, then scaled and shifted so that
# near-identity shortcuts and numerically naive kernels fail.
# Multipliers that give the baselines' timed calls fresh inputs (exact in floating point). The candidate's
# timed calls get inputs of their own instead (sandbox.timed_spec), re-checked on a secret sample.
TIMING_SCALES = (1.0, 0.5, 2.0, 0.25, 4.0, 0.75, 1.5)
RECHECKED = 3
# the most output files a candidate's result channel holds at once: every seed's (the fixed ones and the
# secret one), which the judge clears once compared, or three timing calls' re-checked outputs (RECHECKED
# and the last call's each: the first run, a re-measure of a suspicious speedup and one of an escape,
# each in files of its own)
CHANNEL_FILES = max(len(FIXED_SEEDS) + 1, 3 * (RECHECKED + 1))
DEFAULT_TIMING = {"min_iters": 30, "max_iters": 300, "max_seconds": 3.0, "target_rel_err": 0.005, "warmup": 3}
SUSPICIOUS_SPEEDUP = 10.0
COMPILE_TIMEOUT_S = 600.0     # torch's own load_inline build (fast_inline=False): nvcc and g++
# What a candidate worker's folder (in /dev/shm: host memory the pools' budgets do not see) may hold
# between evaluations: its caches (Triton's, NVRTC's) and the candidates' files. Past it the worker is
# replaced after the evaluation: an honest one's caches pass it only after thousands of kernels, and
# files a candidate left there (it owns the folder) do not outlive its evaluation.
WORKER_FOLDER_BYTES = 1 << 30
# categories that only the judge gives, which mean something past the report (the env and the reward
# score an unservable problem 0): the candidate owns its worker and so its header, and may not claim them
JUDGE_CATEGORIES = frozenset({"unservable", "problem"})


def candidate_category(header: dict) -> str | None:
    """The failure category a candidate's worker reports, unless it is not a short string or is one of
    JUDGE_CATEGORIES (then "forged")."""
    c = header.get("category")
    if c is None:
        return None
    return c if isinstance(c, str) and len(c) <= 64 and c not in JUDGE_CATEGORIES else "forged"


class GPUUnavailableError(RuntimeError):
    pass


NO_GPU = ("backend 'gpu' needs a CUDA GPU, and none is visible here; use --backend cpu for correctness "
          "checks without one")


def cuda_devices() -> int:
    """The CUDA devices the driver shows this process (CUDA_VISIBLE_DEVICES applies), asked of the driver
    itself (libcuda's cuInit and cuDeviceGetCount through ctypes) rather than by importing torch, which
    took a one-off judge 3-4 s on an H200 host before its workers started (judge_start.json); torch
    is imported once the workers are starting (Judge.warm). 0 where there is no driver."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


MAX_TIMEOUT_S = 24 * 3600.0


def default_timeout(backend: str) -> float:
    """A judge's seconds per evaluation where none is given."""
    return 180.0 if backend == "cpu" else 90.0


def check_timeout(timeout_s) -> float | None:
    """A judge's seconds per evaluation: None (the backend's default) or a finite number in (0, 1 day].
    ValueError otherwise (NaN once made every evaluation a runtime_error, stored and served back)."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= MAX_TIMEOUT_S:   # NaN fails every comparison
        raise ValueError(f"timeout {timeout_s!r}: seconds per evaluation must be a number above 0 and at most "
                         f"{MAX_TIMEOUT_S:.0f}")
    return float(timeout_s)


def resolve_backend(backend: str | None) -> str:
    if backend is None or backend == "auto":
        return "gpu" if cuda_devices() else "cpu"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of: {', '.join(BACKENDS)} "
                         "(or leave it out to pick gpu when a CUDA device is present)")
    if backend == "gpu" and not cuda_devices():
        raise GPUUnavailableError(NO_GPU)
    return backend


def _changed_timing(timing: dict | None) -> dict | None:
    """The whole stop rule where it differs from DEFAULT_TIMING, else None."""
    merged = {**DEFAULT_TIMING, **(timing or {})}
    return None if merged == DEFAULT_TIMING else merged


def version_of(backend: str, judge_kw: dict) -> str:
    """The identity (rewards/version.py) of a Judge(backend, **judge_kw): each setting that is not its default
    named, a timeout by its value where it is not the backend's default. A RayPool's driver names its actors'."""
    kw = judge_kw
    timeout_s = check_timeout(kw.get("timeout_s")) or default_timeout(backend)
    compile_s = kw.get("compile_timeout_s", COMPILE_TIMEOUT_S)
    return judge_version(kw.get("static_checks", True), kw.get("python_guard", True), kw.get("fast_inline", True),
                         kw.get("drop_privileges", True), kw.get("recycle", "failure"),
                         _changed_timing(kw.get("timing")),
                         None if timeout_s == default_timeout(backend) else timeout_s,
                         None if compile_s == COMPILE_TIMEOUT_S else compile_s)


class Judge:
    """Scores candidates for problems on one backend and one device, with two worker processes.

    Not thread-safe: a pool holds one Judge per device slot.
    """

    def __init__(self, backend: str | None = None, store: ResultsStore | str | None | bool = None,
                 timeout_s: float | None = None, device_index: int = 0, use_cache: bool = True,
                 drop_privileges: bool = True, recycle: str = "failure", timing: dict | None = None,
                 static_checks: bool = True, gpu_lock: "GpuTurns | threading.Lock | None" = None, slot: int = 0,
                 fast_inline: bool = True, compile_timeout_s: float = COMPILE_TIMEOUT_S, python_guard: bool = True,
                 memory: GpuMemory | None = None, host_memory: GpuMemory | None = None):
        self.backend = resolve_backend(backend)
        self.store = as_store(store)
        self.timeout_s = check_timeout(timeout_s) or default_timeout(self.backend)
        self.device_index = device_index
        self.use_cache = use_cache
        # when the candidate worker is replaced: "failure" (the default: after a failed or flagged evaluation;
        # a candidate that patches the guard's, the watcher's or the timing's functions is flagged, sandbox.
        # _integrity_snapshot), "always" (after every evaluation, a spare started during it taking its place: no
        # state a candidate left in its process meets the next, at the price of its compile caches: on an H200
        # with 4 slots, 0.36-0.48 evaluations/s of L1 kernels against 4.4-5.8, judge_throughput.json), "never"
        if recycle not in ("always", "failure", "never"):
            raise ValueError(f"recycle={recycle!r}: one of 'always', 'failure', 'never'")
        self.recycle = recycle
        self._last_problem: tuple[str, bool] | None = None    # (sha256, built-in): _keep_problems_apart
        self.timing = {**DEFAULT_TIMING, **(timing or {})}
        self.static_checks = static_checks  # False only in tests of the sandbox itself
        # the run-time guard on the candidate's Python (rewards/guard.py); False only in tests of the
        # layers below it (the operating system's walls must hold with the guard gone)
        self.python_guard = python_guard
        # load_inline candidates: the fast path (rewards/inline/), the only one a candidate gets (what it
        # cannot take is a compile_error). False builds them with torch's own load_inline, whose host C++
        # runs natively in the worker: only for benches comparing the two paths on trusted code
        self.fast_inline = fast_inline
        # what the store files this judge's verdicts under, and the only verdicts it serves back (rewards/version.py)
        self.version = version_of(self.backend, dict(
            static_checks=static_checks, python_guard=python_guard, fast_inline=fast_inline, drop_privileges=drop_privileges,
            recycle=recycle, timing=timing, timeout_s=timeout_s, compile_timeout_s=compile_timeout_s))
        # torch's own build (fast_inline=False) takes nvcc + g++, about a minute, more under load: its own
        # time budget, so that an honest candidate never times out on compile load
        self.compile_timeout_s = compile_timeout_s
        # This judge's turns on its GPU, shared with the judges beside it (rewards/gpu_turns.py): timing holds it
        # alone; checking, compiling and the reference's work hold shared turns, beside each other, never beside a
        # timing (red team 19). A plain threading.Lock given here serializes timing only.
        self.gpu_lock = gpu_lock or GpuTurns(gpu_key(device_index) if self.backend == "gpu" else None)
        # The memory of this judge's GPU, shared with the judges beside it (a LocalPool's slots): each
        # evaluation holds what its problem needs there while it runs (rewards/admission.py). None: no
        # admission (a judge alone on its device).
        self.memory = memory
        # the host's shared memory, where the result channel's files live (admission.host_budget): shared by
        # every judge of a pool, held by each evaluation with its GPU memory. None: no admission
        self.host_memory = host_memory
        self._reference_ran: set[str] = set()
        hide = [str(self.store.path)] if self.store is not None else []
        # and every folder a judge server may use, whole: a worker that reached a server's socket could
        # hand it a problem file, whose code its reference worker runs with the user's privileges (made
        # here, so that one a server makes later is covered too)
        for run in judge_run_dirs():
            with contextlib.suppress(OSError):
                run.mkdir(parents=True, exist_ok=True, mode=0o700)
                hide.append(str(run) + os.sep)
        self.ref = WorkerProcess("reference", self.backend, device_index, drop_privileges=False, hide=hide,
                                 slot=slot)
        self._cand_args = dict(drop_privileges=drop_privileges, hide=hide, slot=slot)
        self.cand = WorkerProcess("candidate", self.backend, device_index, **self._cand_args)
        # recycle="always": the worker the next evaluation gets, started while this one runs (a GPU worker's start
        # is ~5 s of torch's import and CUDA's set-up, which a fresh worker per candidate would otherwise add)
        self._spare: WorkerProcess | None = None
        self._meta: dict[str, dict] = {}
        self.baseline_memory: dict[str, dict] = {}   # problem sha256: the reference worker's peak (baselines)
        self._software: str | None = None   # what the store files baselines under beside the device (_store_key)
        self._recalled: set[str] = set()             # problems whose stored peak was looked up (_recall_need)
        self.device = "cpu" if self.backend == "cpu" else ""

    # -- plumbing ------------------------------------------------------------------------
    def close(self) -> None:
        self.ref.close()
        self.cand.close()
        if self._spare is not None:
            self._spare.close()

    def _start_spare(self) -> None:
        if self.recycle == "always" and (self._spare is None or not self._spare.alive):
            if self._spare is not None:
                self._spare.kill()
            self._spare = WorkerProcess("candidate", self.backend, self.device_index, **self._cand_args)
            self._spare.spawn()

    def _next_candidate_worker(self) -> None:
        """The candidate worker replaced by the spare (started during the evaluation that just ended), and a
        new spare started for the evaluation after it; without a live spare, a new worker starts now."""
        self.cand.kill()
        if self._spare is not None and self._spare.alive:
            self.cand, self._spare = self._spare, None
        else:
            self.cand.spawn()
        self._start_spare()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def warm(self) -> None:
        """Start whichever workers are down, both at once."""
        down = [w for w in (self.ref, self.cand) if not w.alive]
        for w in down:
            w.kill()
            w.spawn()
        for w in (self.ref, self.cand):
            if w.alive and not w.ready and w not in down:    # started in the background: read its start now
                w.wait_ready()
        self._start_spare()
        if self.backend == "gpu" and down:   # this process's torch, while the workers start (cuda_devices)
            import torch
            if not torch.cuda.is_available():
                for w in down:
                    w.kill()
                raise GPUUnavailableError(NO_GPU + f" (the driver shows {cuda_devices()} device(s), but torch "
                                          f"{torch.__version__} here has no CUDA)")
        for w in down:
            w.wait_ready()
        if not self.device:
            self.device = self.ref.info.get("device", "gpu")

    def _device_key(self) -> str:
        if not self.device:
            self.warm()
        return f"{self.backend}:{self.device}"

    def _gpu_shared(self):
        """A shared turn on this judge's GPU (rewards/gpu_turns.py) for work that runs there but is not timing;
        nothing on the cpu backend."""
        return shared_turn(self.gpu_lock) if self.backend == "gpu" else contextlib.nullcontext()

    def _ref_call(self, msg: dict, timeout: float | None = None) -> dict:
        try:
            with self._gpu_shared():
                header = self.ref.call(msg, timeout=timeout or self.timeout_s)
        except WorkerTimeout as e:
            self.ref.restart()
            raise ProblemError(f"problem {msg['problem_name']!r}: the reference did not finish ({e})") from e
        except WorkerDied as e:
            tail = self.ref.log_tail()
            self.ref.restart()
            raise ProblemError(f"problem {msg['problem_name']!r}: the reference crashed: {e}\n{tail}") from e
        if not header.get("ok") and header.get("error") in ("too_large", "trivial"):   # before any candidate (reference_role)
            kind = ProblemTrivial if header["error"] == "trivial" else ProblemUnservable
            raise kind(f"problem {msg['problem_name']!r}: {header.get('message', '')}")
        if header.get("restart"):     # the worker says its own state is not to be trusted (handle_baselines)
            self.ref.restart()
        if not header.get("ok"):
            raise ProblemError(f"problem {msg['problem_name']!r} failed while computing its reference "
                               f"({header.get('error')}):\n{header.get('message', '')}")
        return header

    def _problem_meta(self, problem: Problem) -> dict:
        """What the problem allows and its footprint, found on the meta device: nothing is built on the GPU
        yet (cached per problem). Every way a problem's code reaches a worker (evaluate, prepare, refusal,
        check_problem) comes through here first, and keeps problems apart (red team 21: a user's file prepared,
        checked or refused left its code in a kept reference worker, and a zeros kernel on a built-in scored
        correct after it)."""
        self._keep_problems_apart(problem)
        meta = self._meta.get(problem.sha256)
        if meta is None:
            header = self._ref_call({"cmd": "meta", "problem_source": problem.source,
                                        "problem_name": problem.name, "spec": None})
            meta = self._meta[problem.sha256] = header["meta"]
        return meta

    def _reference_once(self, problem: Problem) -> None:
        """The reference run once on seed 0, the first time this judge sees the problem: a problem that
        cannot produce outputs fails here, as a problem error, before any candidate is blamed for it."""
        if problem.sha256 not in self._reference_ran:
            self._ref_call({"cmd": "meta", "problem_source": problem.source, "problem_name": problem.name,
                            "spec": self._specs(())[0], "footprint": False,   # seed 0 is plain whatever is allowed
                            "tolerance": problem.tolerance})
            self._reference_ran.add(problem.sha256)

    def refusal(self, problem: Problem) -> str | None:
        """Why this judge serves no candidate of `problem` (ProblemUnservable: too large for the backend, or
        an answer a kernel computing nothing matches: filters.trivial_answer), or None where it does. Runs
        the problem's reference once, as the first evaluation would; other problem errors raise."""
        self.warm()
        try:
            self._problem_meta(problem)
            self._reference_once(problem)
        except ProblemUnservable as e:
            return str(e)
        return None

    def _keep_problems_apart(self, problem: Problem) -> None:
        """Fresh workers, reference and candidate, wherever the problem changes and either side is not trusted
        (rewards/trusted.py: the package's built-ins and KernelBench's own files): a problem file's module-level
        code runs unguarded in both workers and stays there (red team 18's problem added names to the guard's
        allowlists in the candidate worker, and a torch.softmax candidate on the built-in softmax after it scored
        correct)."""
        last = self._last_problem
        if last is not None and last[0] == problem.sha256:
            return                        # the same problem: its file is read once, not every evaluation
        trusted = is_trusted(problem)
        if last is not None and not (trusted and last[1]):
            self.fresh_reference()
            if self.recycle == "always":
                self._next_candidate_worker()
            elif self.cand.alive:
                self.cand.restart()
        self._last_problem = (problem.sha256, trusted)

    def fresh_reference(self) -> None:
        """A new reference worker, and this judge's per-problem memory of the old one forgotten: a problem
        file's module-level code stays in the worker that loaded it (judge_server recycles it between
        problems that are not the package's own)."""
        self.ref.restart()
        self._meta.clear()
        self._reference_ran.clear()

    @contextlib.contextmanager
    def _admitted(self, problem: Problem, meta: dict):
        """Hold what the problem needs of this judge's GPU, then of the host's shared memory (the result
        channel), while the block runs; always in that order, so two judges never wait on each other.
        No-op without budgets (a judge alone)."""
        fp = meta.get("footprint")
        self._recall_need(problem, fp)
        with contextlib.ExitStack() as held:
            if self.memory is not None:   # the footprint's estimate, or the measured peak where it is more
                held.enter_context(self.memory.hold(self.memory.need(problem.sha256, gpu_need(fp))))
            if self.host_memory is not None:
                held.enter_context(self.host_memory.hold(host_need(fp, CHANNEL_FILES)))
            yield

    def _compare(self, problem: Problem, specs: list[dict], outputs: list, meta: dict) -> list[dict]:
        """Per-spec comparison, done in the reference worker next to the reference outputs."""
        header = self._ref_call({"cmd": "compare", "problem_source": problem.source, "problem_name": problem.name,
                                    "specs": specs, "outputs": outputs, "channel": self.cand.channel,
                                    "atol": meta.get("atol"), "rtol": meta.get("rtol"), "tolerance": problem.tolerance})
        return header["results"]

    def _specs(self, input_transforms) -> list[dict]:
        transforms = _allowed_transforms(input_transforms)
        specs = [{"seed": s, "init_seed": INIT_SEED, "transform": list(t), "label": f"seed{i}:{t[0]}"}
                 for i, (s, t) in enumerate(zip(FIXED_SEEDS, transforms))]
        rng = secrets.SystemRandom()
        t = rng.choice(transforms)
        # fresh inputs and fresh weights, never cached by the reference worker
        specs.append({"seed": secrets.randbits(62), "init_seed": secrets.randbits(62), "transform": list(t),
                      "label": f"secret:{t[0]}", "secret": True, "cache": False})
        return specs

    # -- the evaluation ------------------------------------------------------------------
    def evaluate(self, problem: Problem, candidate: Candidate | str) -> EvalResult:
        if isinstance(candidate, str):
            candidate = Candidate(candidate)
        t0 = self._t = time.perf_counter()
        self._phases: dict[str, float] = {}
        self._compile_paths: list[str] = []
        res = self._evaluate(problem, candidate)
        if not res.cached:
            res.compile_paths = self._compile_paths
            res.judge_version = self.version
        res.elapsed_s = round(time.perf_counter() - t0, 4)
        if not res.cached:
            res.phases = self._phases
        if self.store is not None and not res.cached:
            self.store.record(res, self._device_key(), source=candidate.source)
        return res

    def _phase(self, name: str) -> None:
        now = time.perf_counter()
        self._phases[name] = round(now - self._t, 4)
        self._t = now

    def _fail(self, problem, cand, status, reason, **kw) -> EvalResult:
        return EvalResult.failure(status, reason, problem, cand.sha256, self.backend,
                                  device=self.device, **kw)

    def _evaluate(self, problem: Problem, cand: Candidate) -> EvalResult:
        # 1. static: parse, interface, anti-cheat rules (nothing of the candidate runs here)
        forbidden = problem.meta.get("FORBIDDEN") or ()     # (the problem file's: untrusted, red team 12)
        if not (isinstance(forbidden, (list, tuple)) and all(isinstance(f, str) for f in forbidden)):
            raise ProblemError(f"problem {problem.name!r}: FORBIDDEN must be a list of names such as "
                               f"['torch.softmax'], got {forbidden!r}"[:300])
        if len(cand.source) > MAX_CANDIDATE_CHARS:
            return self._fail(problem, cand, "compile_error", f"the candidate is {len(cand.source):,} characters; the "
                              f"judge takes at most {MAX_CANDIDATE_CHARS:,}",
                              category="syntax")
        bad = lone_surrogate(cand.source)
        if bad is not None:
            return self._fail(problem, cand, "compile_error", f"the candidate's text holds a lone surrogate "
                              f"(U+{ord(cand.source[bad]):04X}) at character {bad:,}, which no UTF-8 source "
                              "can hold", category="syntax")
        try:
            flags = anticheat.check_candidate(cand.source, forbidden)
        except SyntaxError as e:
            return self._fail(problem, cand, "compile_error",
                              f"Python syntax error at line {e.lineno}: {e.msg}", category="syntax",
                              compile_log=f"line {e.lineno}: {e.msg}\n{(e.text or '').rstrip()}")
        except (ValueError, RecursionError, MemoryError) as e:
            return self._fail(problem, cand, "compile_error", f"the candidate cannot be parsed: {e}",
                              category="syntax")
        cls = anticheat.candidate_class(cand.source)
        if cls is None:
            return self._fail(problem, cand, "compile_error", anticheat.NO_CANDIDATE_CLASS, category="no_modelnew")
        if flags and self.static_checks:
            return self._fail(problem, cand, "rejected", "anti-cheat: " + "; ".join(str(f) for f in flags[:5]),
                              flags=flags, category="static")

        self._phase("static")
        if self.use_cache and self.store is not None:
            hit = self.store.get(problem.sha256, cand.sha256, self._device_key(), self.version)
            # a timed result is reused only under the software it was timed with: its speedup is over baselines
            # (torch's, the production libraries') that an upgrade or a newly installed library changes
            if hit is not None and not (hit.timing and hit.timing.get("software") != self._store_key()[1]):
                return hit

        # 2. what the problem allows and needs (reference worker, on the meta device; cached per problem),
        # then its turn on the GPU's memory beside the other judges' evaluations
        self._keep_problems_apart(problem)
        self.warm()
        self._phase("start_workers")
        meta = self._problem_meta(problem)
        with self._admitted(problem, meta):
            self._phase("wait_memory")
            try:
                self._reference_once(problem)
                return self._run(problem, cand, cls, meta)
            finally:
                self.cand.clear_channel(start=False)   # nothing of this evaluation stays in the host's memory
                if self.recycle == "always":
                    # nothing a candidate did to its process (a module it changed, a class it patched) meets the
                    # next one: the spare started beside this evaluation takes its place, and another starts
                    self._next_candidate_worker()
                elif self.cand.folder_bytes() > WORKER_FOLDER_BYTES:
                    self.cand.kill()   # its folder removed with it; the next evaluation starts a fresh one
                elif self.backend == "gpu":
                    self._release_candidate()

    def _run(self, problem: Problem, cand: Candidate, cls: str, meta: dict) -> EvalResult:
        specs = self._specs(meta.get("input_transforms", ()))
        fp = meta.get("footprint")

        # 3. the candidate (candidate worker): outputs go to the file channel, not through here
        self.cand.clear_channel()
        msg = {"cmd": "candidate", "problem_source": problem.source, "problem_name": problem.name,
               "candidate_source": cand.source, "candidate_sha256": cand.sha256, "candidate_class": cls, "specs": specs,
               "channel": self.cand.channel, "fast_inline": self.fast_inline, "python_guard": self.python_guard,
               "max_output_bytes": output_cap(fp), "ref_output_bytes": fp["outputs"] if fp else None}
        header = self._call_candidate(problem, cand, msg)
        if isinstance(header, EvalResult):
            return header
        log = header["log"]

        # 4. compare each seed, in the reference worker
        outputs = header.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != len(specs):
            return self._fail(problem, cand, "runtime_error", "the candidate's worker returned a malformed result",
                              category="protocol")
        seeds_report = []
        for spec, r in zip(specs, self._compare(problem, specs, outputs, meta)):
            seeds_report.append({"seed": "secret" if spec.get("secret") else spec["seed"], "label": spec["label"],
                                 "max_abs_err": r.get("max_abs_err"), "max_rel_err": r.get("max_rel_err"),
                                 "atol": r.get("atol"), "tol_used": _round(r.get("tol_used")), "ok": r["ok"]})
            if not r["ok"]:
                return self._fail(problem, cand, "incorrect", f"wrong result on {spec['label']}: {r['why']}",
                                  seeds=seeds_report, category="mismatch", log_tail=log)
        self._phase("compare")
        self.cand.clear_channel(start=False)   # the seeds' files are compared: their host memory goes back
        if self.backend != "gpu":
            return EvalResult(status="correct", reason=f"correct on {len(specs)} seeds (cpu backend: "
                              "correctness only, no timing)", problem=problem.name, backend=self.backend,
                              candidate_sha256=cand.sha256, problem_sha256=problem.sha256, device=self.device,
                              seeds=seeds_report, log_tail=log)
        return self._finish_gpu(problem, cand, specs, header, meta, seeds_report, log)

    def _release_candidate(self) -> None:
        """The candidate worker drops the model it kept for timing before this evaluation's turn on the GPU's
        memory ends (admission reserves a slot's workers only their contexts between evaluations). The
        worker is the candidate's: one that does not answer at once is replaced."""
        if not self.cand.alive:
            return
        try:
            self.cand.call({"cmd": "release"}, timeout=10)
        except Exception:  # noqa: BLE001 - WorkerTimeout / WorkerDied, or an unreadable answer
            self.cand.kill()

    def _call_candidate(self, problem: Problem, cand: Candidate, msg: dict) -> dict | EvalResult:
        """One command to the candidate worker. A hang, a crash, an unreadable answer, a
        failure or an anti-cheat flag comes back as the EvalResult to return."""
        timeout = self.timeout_s
        if msg["cmd"] == "candidate" and "load_inline" in cand.source and not self.fast_inline:
            timeout = max(timeout, self.compile_timeout_s)
        # (the timing's call comes with the exclusive turn held: passes through); writing held outputs to the
        # channel is host work alone, no turn on the GPU
        turn = contextlib.nullcontext() if msg["cmd"] == "write_kept" else self._gpu_shared()
        try:
            with turn:
                header = self.cand.call(msg, timeout=timeout)
        except WorkerTimeout as e:
            tail = self.cand.log_tail()
            self.cand.restart()
            return self._fail(problem, cand, "timeout", f"the candidate did not finish within "
                              f"{timeout:.0f} s ({e}); the worker was killed and replaced",
                              category="hang", log_tail=tail)
        except WorkerDied as e:
            tail = self.cand.log_tail()
            self.cand.restart()
            cat = "crash"
            if "SIGKILL" in str(e) and "MemoryError" not in tail:
                cat = "killed"
            return self._fail(problem, cand, "runtime_error", f"the candidate crashed its process: {e}; "
                              "the worker was replaced", category=cat, log_tail=tail)
        except Exception as e:  # noqa: BLE001 - defensive: no path should get here
            self.cand.restart()
            return self._fail(problem, cand, "runtime_error", f"the candidate's worker sent an unreadable "
                              f"result ({type(e).__name__}); the worker was replaced", category="protocol")
        self._phase(msg["cmd"])
        paths = header.get("inline_paths")
        if isinstance(paths, list):
            self._compile_paths = [str(p)[:300] for p in paths[:20]]
        for k, v in (header.get("phases") or {}).items():
            if isinstance(v, (int, float)):
                self._phases[f"{msg['cmd']}.{k}"] = v
        log = header["log"] = self.cand.log_tail()
        if not header.get("ok"):
            if header.get("error") in ("problem_load", "problem_run"):
                raise ProblemError(f"problem {problem.name!r} failed in the candidate's worker:\n"
                                   f"{header.get('message')}")
            self.cand.restart()
            return self._fail(problem, cand, "runtime_error", f"judge worker error: {header.get('message', '')[-1500:]}",
                              category="worker", log_tail=log)
        flags = [Flag(**f) for f in header.get("flags", []) if isinstance(f, dict)]
        dirty = bool(flags) or header.get("status") != "ran"
        # a worker a candidate tampered with (judge functions replaced, torch's state left changed) judges nothing
        # again, whatever the recycle policy: "never" spares the restarts of ordinary failures, not this
        tampered = any(f.rule == "monkeypatch" for f in flags)
        if dirty and self.recycle in ("failure", "always") or tampered:
            self.cand.restart()     # ("always": after the evaluation too, once its timing is done; _evaluate)
        if header.get("status") != "ran":
            status = header.get("status")
            if status not in ("compile_error", "runtime_error", "incorrect", "timeout"):
                status = "runtime_error"
            if flags:
                status = "rejected"
            return self._fail(problem, cand, status, header.get("reason", ""), category=candidate_category(header),
                              flags=flags, compile_log=header.get("compile_log"),
                              log_tail=(log or header.get("traceback")))
        if flags:
            return self._fail(problem, cand, "rejected", "anti-cheat: " + "; ".join(str(f) for f in flags[:5]),
                              flags=flags, category="dynamic", log_tail=log)
        return header

    def _finish_gpu(self, problem, cand, specs, header, meta, seeds_report, log) -> EvalResult:
        # 5. the GPU phase, holding the device: time (every kernel accounted), re-check a sample of timed outputs
        floor_ms = self._floor_ms(meta)
        remeasured = False
        transforms = [list(t) for t in _allowed_transforms(meta.get("input_transforms", ()))]
        attempts = [0]      # each timing call's re-checked outputs in files of its own (t1r0.bin, t2r0.bin...)

        def time_it():
            """The candidate's timing header, or its failure (with the seeds' report) to return. Every timed
            call gets inputs of its own (sandbox.timed_spec, from a secret base seed); the outputs of RECHECKED
            calls drawn uniformly from all the timed calls as they run (timing.time_gpu's reservoir), and the
            last call's, are re-checked."""
            fresh = {"seed": secrets.randbits(62), "init_seed": specs[0]["init_seed"], "transforms": transforms}
            attempts[0] += 1
            msg = {"cmd": "time", "candidate_sha256": cand.sha256, "timing": self.timing, "fresh": fresh,
                   "sample": RECHECKED, "recheck_prefix": f"t{attempts[0]}r"}
            h = self._call_candidate(problem, cand, msg)
            if isinstance(h, EvalResult):
                h.seeds = seeds_report
            else:
                h["fresh"], h["prefix"] = fresh, msg["recheck_prefix"]
            return h

        with self.gpu_lock:
            self._phase("wait_gpu")
            header = time_it()
        if isinstance(header, EvalResult):
            return header
        # inductor's host work for the baselines, outside the lock (nothing once they are stored), and only
        # for a candidate that timed: the compiled model waits in the reference worker for the call below
        self.compile_baselines(problem, specs)
        self._phase("compile_baselines")
        with self.gpu_lock:
            baselines = self.baselines(problem, specs)
            self._phase("baselines")
            best = _best_ms(baselines)
            t_ms = header["timing"]["median_ms"]
            if (floor_ms and t_ms < 0.9 * floor_ms) or (best and t_ms > 0 and best / t_ms > SUSPICIOUS_SPEEDUP):
                # too good to take on one measurement: time again and keep the slower run
                again = time_it()
                if isinstance(again, EvalResult):
                    return again
                remeasured = True
                if again["timing"]["median_ms"] > t_ms:
                    header = again
                self._phase("remeasure")
            if _escaped(header["timing"]):
                # host time far above the events': work outside the timed stream, or a host busy with
                # the other slots' compiles (seen: 2 of 256 honest Triton kernels, 26 us, on an H200).
                # An escape shows on every run; contention rarely twice. Time again, keep a clean run.
                again = time_it()
                if isinstance(again, EvalResult):
                    return again
                remeasured = True
                if not _escaped(again["timing"]):
                    header = again
                self._phase("remeasure")
        if header.get("held"):
            # the re-checked outputs the worker held in its memory through the timing (sandbox.handle_time's keep),
            # written to the channel now that the other slots have the GPU
            written = self._call_candidate(problem, cand, {"cmd": "write_kept", "prefix": header["prefix"]})
            if isinstance(written, EvalResult):
                written.seeds = seeds_report
                return written
        log = header["log"] or log
        checks = [c for c in header.get("recheck", []) if isinstance(c, dict) and isinstance(c.get("k"), int)]
        n = header["timing"].get("samples")
        ks = [c["k"] for c in checks]
        if not (isinstance(n, int) and n > 0 and len(set(ks)) == len(ks) == len(header.get("recheck", []))
                and n - 1 in ks and all(0 <= k < n for k in ks) and len(ks) in (min(RECHECKED, n), min(RECHECKED, n) + 1)):
            # (the worker draws and reports them: only code past the guard could change what it says)
            return self._fail(problem, cand, "rejected", f"anti-cheat: the timed calls re-checked ({ks[:8]}) are not "
                              f"a sample of the {n} timed calls and the last", seeds=seeds_report, category="dynamic",
                              flags=[Flag("monkeypatch", "the timing's re-check sample was changed")], log_tail=log)
        if checks:
            rspecs = [timed_spec(header["fresh"], c["k"]) for c in checks]
            for c, r in zip(checks, self._compare(problem, rspecs, header.get("recheck_outputs", []), meta)):
                if not r["ok"]:
                    return self._fail(problem, cand, "incorrect", f"a timed call (#{c['k']}) returned a wrong "
                                      f"result: {r['why']}", seeds=seeds_report, category="timed_mismatch",
                                      log_tail=log)
        self._phase("recheck")
        timing = header["timing"]
        timing["device"] = self.device
        timing["software"] = self._store_key()[1]
        timing["remeasured"] = remeasured
        speedups = {k: v["median_ms"] / timing["median_ms"] for k, v in baselines.items()
                    if isinstance(v, dict) and v.get("median_ms") and timing["median_ms"] > 0}
        best = _best_ms(baselines)
        speedup = best / timing["median_ms"] if best and timing["median_ms"] > 0 else None
        best_name = min(speedups, key=speedups.get) if speedup else None
        flags: list[Flag] = []
        # 6. sanity: faster than the memory floor is impossible; > 10x was re-measured and is flagged
        if floor_ms and timing["median_ms"] < 0.9 * floor_ms:
            return self._fail(problem, cand, "rejected", f"measured {timing['median_ms']:.4f} ms, below the "
                              f"roofline floor of {floor_ms:.4f} ms: impossible, so the timing was evaded",
                              flags=[Flag("impossible_speed", f"{timing['median_ms']:.4f} ms < floor {floor_ms:.4f} ms")],
                              timing=timing, seeds=seeds_report, category="roofline")
        if _escaped(timing):
            flags.append(Flag("escaped_timing", f"host wall time {timing['wall_median_ms']:.3f} ms vs "
                              f"events {timing['median_ms']:.3f} ms: work may run outside the timed stream"))
        if speedup and speedup > SUSPICIOUS_SPEEDUP:
            flags.append(Flag("suspicious_speedup", f"{speedup:.1f}x over the best baseline; re-measured"))
        if any(f.rule == "escaped_timing" for f in flags):
            return self._fail(problem, cand, "rejected", "anti-cheat: " + str(flags[0]), flags=flags,
                              timing=timing, seeds=seeds_report, category="timing")
        return EvalResult(status="correct", reason=f"correct on {len(specs)} seeds; "
                          + (f"{speedup:.3f}x vs the best baseline ({best_name})" if speedup else "no baseline"),
                          problem=problem.name, backend=self.backend, candidate_sha256=cand.sha256,
                          problem_sha256=problem.sha256, device=self.device, speedup=speedup, speedups=speedups,
                          best_baseline=best_name,
                          baselines=baselines, timing=timing, seeds=seeds_report, flags=flags, log_tail=log)

    def check_problem(self, problem: Problem) -> dict[str, Any]:
        """Run the problem filters (rewards/filters.py) in the reference worker on the seeds and
        input transforms this judge uses. Returns {"meta": ..., "checks": [...], "outputs": ...};
        raises ProblemError when the problem cannot run at all."""
        self.warm()
        meta = self._problem_meta(problem)
        specs = [s for s in self._specs(meta.get("input_transforms", ())) if not s.get("secret")]
        with self._admitted(problem, meta):
            try:
                self._reference_once(problem)
            except ProblemTrivial:     # refused as trivial: the filters say why, in their words
                pass
            header = self._ref_call({"cmd": "check", "problem_source": problem.source, "problem_name": problem.name,
                                     "specs": specs, "atol": meta.get("atol"), "rtol": meta.get("rtol"),
                                     "tolerance": problem.tolerance},
                                    timeout=max(self.timeout_s, 600))   # dozens of forwards plus a float64 one
        return {"meta": meta, **header["report"]}

    def _floor_ms(self, meta: dict) -> float | None:
        nbytes = meta.get("bytes")
        if not nbytes:
            return None
        return nbytes / (_PEAK_BANDWIDTH_GBS.get(self.device, _ANY_GPU_BANDWIDTH_GBS) * 1e9) * 1e3

    def _store_key(self) -> tuple[str, str]:
        """(device, software): what the store files baselines and peaks under. The software names torch,
        the production-baseline libraries installed (the `baselines` extra: their kernels are timed too) and
        this judge (rewards/version.py: the reference worker that measured them is the judge's code, red team 21)."""
        if self._software is None:      # a process's constant: found once, not on every evaluation
            import torch
            self._software = " ".join([f"torch {torch.__version__}", *production_libraries(), f"judge {self.version}"])
        return self._device_key(), self._software

    def _stored_baselines(self, problem: Problem) -> tuple[dict | None, str, str]:
        """(the baselines the store holds for this problem on this device and software, or None; the device
        key; the software)."""
        key, software = self._store_key()
        hit = self.store.get_baselines(problem.sha256, key, software) if self.store is not None else None
        return hit or None, key, software

    def _recall_need(self, problem: Problem, fp: dict | None) -> None:
        """What an earlier pool measured of this problem's memory (the store's peaks), taught to this GPU's
        budget before the first evaluation of it here holds its share (once a problem per judge)."""
        if self.memory is None or self.store is None or problem.sha256 in self._recalled:
            return
        self._recalled.add(problem.sha256)
        peak = self.store.get_peak(problem.sha256, *self._store_key())
        if peak:
            self.memory.learn(problem.sha256, measured_need(peak, fp))

    def _baseline_specs(self, problem: Problem, specs: list[dict] | None) -> tuple[list[dict], tuple]:
        kinds = (self._meta.get(problem.sha256) or {}).get("input_transforms", _allowed_kinds(problem.meta))
        return [s for s in (specs or self._specs(kinds)) if not s.get("secret")], kinds

    def compile_baselines(self, problem: Problem, specs: list[dict] | None = None) -> None:
        """The problem's torch.compile built and run once in the reference worker, for the baselines call
        that follows: seconds to minutes of inductor's host work, which the judge does outside its GPU lock
        rather than under it, where every other slot's timing would wait on it. Nothing where the
        baselines are in the store."""
        self._keep_problems_apart(problem)
        if self.backend != "gpu" or self._stored_baselines(problem)[0]:
            return
        specs, _ = self._baseline_specs(problem, specs)
        self._ref_call({"cmd": "baselines", "problem_source": problem.source, "problem_name": problem.name,
                        "specs": specs, "compile_only": True}, timeout=max(self.timeout_s, 600))

    def baselines(self, problem: Problem, specs: list[dict] | None = None) -> dict[str, Any]:
        """Eager, CUDA-graph and torch.compile times for the problem on this device (cached). The reference
        worker's peak GPU memory over the problem's reference run, compile and timing goes to
        `baseline_memory[problem.sha256]`, to this GPU's budget as the problem's measured need, and to the
        store (its peaks) for later pools."""
        self._keep_problems_apart(problem)
        hit, key, software = self._stored_baselines(problem)
        if hit:
            return hit
        specs, kinds = self._baseline_specs(problem, specs)
        scales = list(TIMING_SCALES) if "scale" in kinds else [1.0]
        meta = self._meta.get(problem.sha256) or {}
        header = self._ref_call({"cmd": "baselines", "problem_source": problem.source,
                                    "problem_name": problem.name, "specs": specs, "scales": scales,
                                    "timing": self.timing, "atol": meta.get("atol"), "rtol": meta.get("rtol"),
                                    "tolerance": problem.tolerance}, timeout=max(self.timeout_s, 600))
        out = header["baselines"]
        if isinstance(header.get("memory"), dict):
            self.baseline_memory[problem.sha256] = header["memory"]
            peak = header["memory"].get("peak_reserved")
            if isinstance(peak, int):
                fp = (self._meta.get(problem.sha256) or {}).get("footprint")
                if self.memory is not None:
                    self.memory.learn(problem.sha256, measured_need(peak, fp))
                if self.store is not None:
                    self.store.put_peak(problem.sha256, key, software, peak)
        if self.store is not None:
            self.store.put_baselines(problem.sha256, key, software, out)
        return out

    def prepare(self, problem: Problem) -> dict[str, Any]:
        """A problem made ready to judge, as its first evaluation would make it, with no candidate: its
        footprint found, its reference run once and, on a GPU, its baselines computed and stored, all in
        its turn on the GPU's memory. What a training run over a new suite pays up front (a LocalPool's
        prepare_many does it for many problems at once). Returns {"problem", "footprint", "gpu_need",
        "baselines", "memory" (the reference worker's peak bytes), "need" (what its evaluations will hold:
        the measured peak's need where it is more than gpu_need), "seconds"}; a problem that cannot run
        raises ProblemError, as evaluate does."""
        t0 = time.perf_counter()
        self.warm()
        meta = self._problem_meta(problem)
        out: dict[str, Any] = {"problem": problem.name, "footprint": meta.get("footprint"),
                               "gpu_need": gpu_need(meta.get("footprint"))}
        with self._admitted(problem, meta):
            self._reference_once(problem)
            if self.backend == "gpu":
                self.compile_baselines(problem)
                with self.gpu_lock:
                    out["baselines"] = self.baselines(problem)
                out["memory"] = self.baseline_memory.get(problem.sha256)
        if self.memory is not None:   # what its evaluations will hold from now on (the measured peak's, if more)
            out["need"] = self.memory.need(problem.sha256, out["gpu_need"])
        out["seconds"] = round(time.perf_counter() - t0, 3)
        return out


# Datasheet peak HBM bandwidth (GB/s): a floor that no kernel beats. Used only for the
# "faster than physically possible" rejection, so the generous datasheet figure is right.
_PEAK_BANDWIDTH_GBS = {"NVIDIA H100 80GB HBM3": 3350.0, "NVIDIA H200": 4800.0, "NVIDIA H100 PCIe": 2000.0}
_ANY_GPU_BANDWIDTH_GBS = 8000.0  # above every HBM part shipping (B200: 8 TB/s)


def _escaped(timing: dict) -> bool:
    """The host's wall time per call is far above the events' (work may run outside the timed stream)."""
    return timing.get("wall_median_ms", 0) > 2 * timing["median_ms"] + 0.2 + timing.get("launch_hidden_us", 0) / 1e3


# The libraries of the `baselines` extra (pyproject.toml) whose kernels problems time as production baselines.
PRODUCTION_LIBRARIES = ("liger-kernel", "flash-linear-attention", "flashinfer-python", "torchao")


def production_libraries() -> list[str]:
    """'name version' of each production-baseline library installed here (importlib.metadata, no import)."""
    from importlib import metadata
    out = []
    for name in PRODUCTION_LIBRARIES:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return out


def _best_ms(baselines: dict) -> float | None:
    return min((v["median_ms"] for v in baselines.values() if isinstance(v, dict) and v.get("median_ms")),
               default=None)


def _round(x: float | None) -> float | None:
    """A share of the tolerance, to 4 significant digits (a 1e30 for a zero tolerance stays one)."""
    return float(f"{x:.4g}") if isinstance(x, float) else x


def _allowed_kinds(meta: dict) -> tuple:
    return tuple(meta.get("INPUT_TRANSFORMS", ("scale", "shift")))


def evaluate(problem: Problem, candidate: Candidate | str, backend: str | None = None, **kw) -> EvalResult:
    """One-shot convenience: start a judge, score one candidate, stop it."""
    with Judge(backend=backend, **kw) as j:
        return j.evaluate(problem, candidate)


# Helpers for pools of judges (LocalPool, RayPool): one failed item is a failed result, not a lost batch


def problem_failure(e: ProblemError, problem: Problem, candidate: Candidate, backend: str) -> EvalResult:
    """The result of a candidate whose problem failed: not_run with category "unservable" where the
    backend cannot run the problem at all (ProblemUnservable, the same for every candidate: the env
    ends such an episode with no reward), else a runtime_error with category "problem" (a candidate can
    reach those)."""
    if isinstance(e, ProblemUnservable):
        return EvalResult.failure("not_run", str(e), problem, candidate.sha256, backend, category="unservable")
    return EvalResult.failure("runtime_error", f"problem error: {e}", problem, candidate.sha256, backend,
                              category="problem")


def judge_one(judge: Judge, problem: Problem, candidate: Candidate, backend: str) -> tuple[EvalResult, bool]:
    """judge.evaluate, where a broken problem or a broken judge is a failed result for this item
    rather than an exception that loses the whole batch. The flag says whether the judge itself
    made the result (only those belong in the results store)."""
    try:
        return judge.evaluate(problem, candidate), True
    except ProblemError as e:
        return problem_failure(e, problem, candidate, backend), False
    except Exception as e:  # noqa: BLE001 - one broken slot must not lose the batch
        return EvalResult.failure("runtime_error", f"judge error: {type(e).__name__}: {e}", problem,
                                  candidate.sha256, backend, category="judge"), False


def warm_all(judges: Sequence[Judge]) -> None:
    """Start every judge's workers at once (each start is seconds of torch import)."""
    threads = [threading.Thread(target=j.warm) for j in judges]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


__all__ = ["Judge", "evaluate", "compare", "resolve_backend", "GPUUnavailableError"]
