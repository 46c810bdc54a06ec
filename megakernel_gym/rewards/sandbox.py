"""What runs inside a judge worker process: the problem's reference, or the candidate.

Two roles, always in different processes, so reference outputs never exist where the
candidate runs:
- `reference`: runs the problem's Model on seeded inputs and times the baselines.
- `candidate`: runs ModelNew under inspection (aten ops seen, fresh allocations poisoned,
  launches counted, inputs checked unchanged), then times it on the GPU.

Messages are JSON over a private pipe, never pickles: a hostile worker cannot make the judge
run code by what it sends. Bulk data (outputs) goes through a file channel as raw bytes with
a JSON description (see correctness.py).

This module is the process (set-up, the main loop) and the candidate role; the reference role's
commands are reference_role.py, what both roles share (inputs, models, memory given back)
worker_env.py, and the accounting of the kernels a timed call ran kernel_accounting.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from megakernel_gym.rewards.fresh_memory import poison_if_fresh
from megakernel_gym.rewards.kernel_accounting import KernelSession, _own_kernel_names, judge_stream
from megakernel_gym.rewards.launch_args import _check_launch_args, _grid_now
from megakernel_gym.rewards.reference_role import (handle_baselines, handle_check, handle_compare, handle_meta,
                                                    trim_resident)
from megakernel_gym.rewards.worker_env import Env, _free_cached, _load_module, _tb, as_outputs, outputs_over

MAX_MESSAGE_BYTES = 1 << 26  # JSON only: sources, descriptions, results

# aten ops a candidate's Python may run: allocation, views, copies, metadata. Anything else
# during ModelNew.forward is torch compute, which the rules forbid (the compute must be the
# candidate's own kernels).
ALLOWED_ATEN = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "permute", "transpose", "t", "expand",
    "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten", "select", "slice", "as_strided",
    "split", "split_with_sizes", "narrow", "detach", "alias", "clone", "contiguous", "copy_",
    "_to_copy", "to", "lift_fresh", "lift_fresh_copy", "unbind", "view_as", "arange", "scalar_tensor",
    "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "resolve_conj", "resolve_neg", "_has_compatible_shallow_copy_type",
    "empty_permuted", "cat", "stack", "diagonal", "movedim", "unfold",
}


# ---------------------------------------------------------------------------------------
# wire format


def send(conn, message: dict) -> None:
    conn.send_bytes(json.dumps(message).encode())


def recv(conn, limit: int = MAX_MESSAGE_BYTES) -> dict:
    message = json.loads(conn.recv_bytes(limit).decode())
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


# ---------------------------------------------------------------------------------------
# process set-up


def _watch_parent(judge_pid: int) -> None:
    """Without the namespace wrapper: end this worker when the judge is gone."""
    import threading
    import time as _time

    def watch():
        while os.getppid() == judge_pid:
            _time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="mkgym-watch-judge").start()


# Secrets and judge paths never reach code running in a worker.
_ENV_DROP = ("MKGYM_STORE",)
_ENV_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


def visible_device(device_index: int, parent_visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker of GPU `device_index`, counted among the devices its judge
    was given: a Ray actor is handed one GPU (CUDA_VISIBLE_DEVICES=1, say) and its judges use
    index 0 of that, which is physical GPU 1, not GPU 0."""
    ids = [d.strip() for d in parent_visible.split(",") if d.strip()] if parent_visible else []
    return ids[device_index] if device_index < len(ids) else str(device_index)


def _forget_spawn_arguments() -> None:
    """multiprocessing keeps the worker's arguments (the store's paths among them) on its Process
    object; nothing of the set-up stays reachable from the candidate's code."""
    import multiprocessing
    proc = multiprocessing.current_process()
    proc._args, proc._kwargs = (), {}


def _scrub_environment() -> None:
    for k in list(os.environ):
        if k in _ENV_DROP or any(w in k.upper() for w in _ENV_SECRET_WORDS):
            del os.environ[k]


def _pin_cpu(role: str, slot: int) -> None:
    """One core per worker: fewer migrations, steadier host-side launch latency in timings."""
    try:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 4:
            os.sched_setaffinity(0, {cores[(2 * slot + (role == "candidate")) % len(cores)]})
    except (AttributeError, OSError):
        pass


def _limit_memory(backend: str) -> None:
    if backend != "cpu":
        return  # CUDA reserves huge virtual ranges; GPU allocations fail on their own
    try:
        import resource
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        cap = int(min(16 * 2**30, 0.5 * total))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ValueError, OSError, AttributeError):
        pass


def after_command(env: Env, role: str, msg: dict) -> None:
    """Between commands a worker holds only what it keeps on purpose: admission counts a slot's workers at
    their contexts and resident caches (admission.gpu_budgets), not at their last command's peak. A
    baselines model compiled for a timing call (compile_only) waits for the next command alone: one that
    is not that call (the baselines were stored by another slot meanwhile) drops it."""
    if role == "reference" and not (msg.get("cmd") == "baselines" and msg.get("compile_only")):
        env.compiled = None
    if env.backend == "gpu":
        try:
            if role == "reference":
                trim_resident(env)
            _free_cached(env.torch)
        except BaseException:  # noqa: BLE001 - a broken context shows in the next command
            pass


# ---------------------------------------------------------------------------------------
# candidate role


class Inspector:
    """TorchDispatchMode that records aten ops and poisons fresh allocations."""

    def __init__(self, torch, counter: "LaunchCounter"):
        from torch.utils._python_dispatch import TorchDispatchMode
        inspector = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if counter.moving_args:
                    return out  # Triton's CPU interpreter moving a launch's arguments (the judge's own)
                name = func.overloadpacket.__name__
                inspector.ops.append(name)
                poison_if_fresh(torch, name, out)
                # the memory the call makes: outputs of ops whose returns alias none of their arguments (a view, an
                # in-place op's or an out= op's return is memory that was there before), and torch.tensor(...)'s
                # (lift_fresh returns the tensor the call just built from its data)
                if name == "lift_fresh" or not any(r.alias_info is not None for r in func._schema.returns):
                    for t in (out if isinstance(out, (tuple, list)) else (out,)):
                        if isinstance(t, torch.Tensor) and t.device.type != "meta":
                            inspector.fresh.add(t.untyped_storage().data_ptr())
                return out

        self.torch = torch
        self.ops: list[str] = []
        self.fresh: set[int] = set()     # the storages the call's ops made (an output must be one of them)
        self.mode = _Mode()

    def forbidden(self) -> list[str]:
        return sorted({op for op in self.ops if op not in ALLOWED_ATEN})


class LaunchCounter:
    """Counts launches of the candidate's own kernels: Triton, NVRTC (load_cuda), load_inline."""

    def __init__(self, torch):
        from megakernel_gym.cuda import nvrtc
        self.nvrtc = nvrtc
        self.triton = 0
        self.inline = 0
        self.in_kernel = 0
        # >0 only while Triton's CPU interpreter moves a launch's arguments between torch and numpy: the
        # one window in which the judge's watchers look away (not the grid callable, not the body)
        self.moving_args = 0
        self.refuse = None   # the guard's refusal, where the guard is on (constexpr arguments below)
        self.kernel_names: set[str] = set()
        counter = self
        import triton.runtime.jit as tjit
        classes = [tjit.JITFunction]
        try:
            from triton.runtime import interpreter
            from triton.runtime.interpreter import InterpretedFunction

            from megakernel_gym.rewards import triton_cpu
            classes.append(InterpretedFunction)
            refuse = lambda what, hint: (counter.refuse or triton_cpu.refusal)(what, hint)  # noqa: E731 (the guard's, once on)
            triton_cpu.mark_argument_moves(interpreter, self)
            triton_cpu.interpret_own_source(interpreter, refuse)
            bounds = triton_cpu.bound_memory(interpreter, refuse)
            if os.environ.get("TRITON_INTERPRET") == "1":
                triton_cpu.compile_before_running(interpreter, bounds, refuse)
            if os.environ.get("TRITON_INTERPRET") == "1":
                triton_cpu.autotune_without_benchmarks()
        except ImportError:
            pass
        for cls in classes:
            orig = cls.run

            def run(self, *a, __orig=orig, **kw):
                _check_launch_args(self, a, kw, counter)
                if callable(kw.get("grid")):
                    kw["grid"] = _grid_now(self, kw["grid"], a, kw)
                counter.triton += 1
                counter.kernel_names.add(getattr(getattr(self, "fn", None), "__name__", "") or
                                         getattr(self, "__name__", ""))
                counter.in_kernel += 1
                try:
                    return __orig(self, *a, **kw)
                finally:
                    counter.in_kernel -= 1
            cls.run = run
        import torch.utils.cpp_extension as cpp
        from megakernel_gym.rewards import inline
        orig_inline = inline.real_build(cpp.load_inline)
        # off only in benches that compare the fast path with torch's build on trusted code (Judge's
        # fast_inline): torch's build runs the host C++ natively, so it is never a candidate's path
        self.fast_inline = True
        self.inline_paths: list[str] = []   # per load_inline call: "fast", or "load_inline: <why>"

        def load_inline(*a, **kw):
            # KernelBench-format CUDA: device code through NVRTC and the host wrapper interpreted
            # (rewards/inline/); what that cannot take is the candidate's compile_error, never a native build
            fell = []
            if counter.fast_inline:
                mod = inline.load_inline(*a, gpu=torch.cuda.is_available(), **kw)
            else:
                mod = orig_inline(*a, **kw)
                fell.append("fast path off")
            counter.inline_paths.append("load_inline: " + fell[0] if fell else "fast")
            counter.kernel_names.update(inline.kernel_names(kw.get("cuda_sources", a[2] if len(a) > 2 else None)))
            # the fast path's interpreter counts each kernel it launches (nvrtc._count_launch); a call of an
            # exported function is not one (red team 11: a host function returning x.clone() counted as a launch)
            return mod if counter.fast_inline else _CountingModule(mod, counter)
        cpp.load_inline = load_inline
        self.installed = {c: c.run for c in classes}
        self.installed_inline = load_inline

    def total(self) -> int:
        return self.triton + self.inline + self.nvrtc.launch_count()

    def intact(self) -> bool:
        import torch.utils.cpp_extension as cpp
        return all(c.run is f for c, f in self.installed.items()) and cpp.load_inline is self.installed_inline


class _CountingModule:
    def __init__(self, mod, counter):
        self._mod, self._counter = mod, counter

    def __getattr__(self, name):
        attr = getattr(self._mod, name)
        if callable(attr):
            def call(*a, **kw):
                self._counter.inline += 1
                return attr(*a, **kw)
            return call
        return attr


JUDGE_MODULES = ("torch", "triton", "megakernel_gym.cuda.timing", "megakernel_gym.rewards.correctness",
                 "megakernel_gym.rewards.sandbox", "megakernel_gym.rewards.guard", "megakernel_gym.rewards.kernel_accounting")


def _integrity_snapshot(torch) -> dict[str, Any]:
    """Identities of the functions the judge's own measurements rely on."""
    import inspect
    import time as _time
    T = lambda name: inspect.getattr_static(torch.Tensor, name)  # noqa: E731  (no fresh bound methods)
    snap = {"perf_counter": _time.perf_counter, "equal": torch.equal, "Tensor.clone": T("clone"),
            "Tensor.cpu": T("cpu"), "manual_seed": torch.manual_seed, "save": torch.save,
            "Tensor.copy_": T("copy_"), "Tensor.__torch_dispatch__": T("__torch_dispatch__"),
            "Tensor.__torch_function__": T("__torch_function__"), "device": torch.device}
    # the judge's own functions its commands import when they run, and the modules they come from (red team 9
    # replaced megakernel_gym.rewards.correctness in sys.modules, so handle_candidate imported its write_outputs);
    # the worker's commands call the functions taken here
    import importlib

    import megakernel_gym.cuda.timing as timing
    import megakernel_gym.rewards.correctness as correctness
    snap.update({"time_gpu": timing.time_gpu, "write_outputs": correctness.write_outputs,
                 "hold_outputs": correctness.hold_outputs, "write_held": correctness.write_held,
                 "HOLD_BYTES": correctness.HOLD_BYTES})
    # and the guard's and the watcher's methods (red team 10 set Guard._attr_allowed and Inspector.forbidden to
    # functions of its own from a candidate that scored correct, for every later candidate in the worker)
    from megakernel_gym.rewards.guard import Guard
    for cls in (Guard, Inspector, LaunchCounter):
        snap.update({f"{cls.__name__}.{n}": v for n, v in vars(cls).items() if callable(v) or isinstance(v, property)})
    snap.update({f"sys.modules[{m}]": importlib.import_module(m) for m in JUDGE_MODULES})   # (loaded now if not yet)
    # triton.language's functions: Triton's CPU interpreter swaps in its own while a launch runs and puts them back
    # after; left swapped (red team 24, a direct call of a jit function), tl.load and tl.exp computed in host code
    # for this candidate and every later one in the worker
    tl = sys.modules.get("triton.language")
    if tl is not None:
        snap.update({f"tl.{n}": v for n, v in vars(tl).items() if not n.startswith("_") and callable(v)})
    # the names of the modules a jit body may name, which the rules and the launch check go by (red team 25:
    # tl.math.wraps(kernel)(tl) renamed triton.language, and every later kernel in the worker was refused), and
    # numpy's functions, which the interpreter computes a kernel with (red team 25 slowed numpy.exp from a kernel
    # body for the next candidate)
    from megakernel_gym.rewards.jit_rules import JIT_PATH_MODULES
    for m in sorted(JIT_PATH_MODULES):
        if m in sys.modules:
            snap[f"{m}.__name__"] = vars(sys.modules[m]).get("__name__")
    np = sys.modules.get("numpy")
    if np is not None:
        snap.update({f"numpy.{n}": v for n, v in vars(np).items() if not n.startswith("_") and callable(v)})
    if torch.cuda.is_available():
        E = lambda name: inspect.getattr_static(torch.cuda.Event, name)  # noqa: E731
        snap.update({"Event": torch.cuda.Event, "Event.elapsed_time": E("elapsed_time"),
                     "Event.record": E("record"), "synchronize": torch.cuda.synchronize})
    return snap


def _torch_state(torch) -> dict[str, Any]:
    """torch's process-wide state that a candidate's code can leave changed behind it for the next candidate in
    the worker: red team 14 left `with torch.device("meta"):` open in a suspended generator from a correct
    candidate, so the next one's `torch.empty(shape)` was a meta tensor (an honest softmax: runtime_error)."""
    def call(fn, *a):
        try:
            return fn(*a)
        except Exception as e:  # noqa: BLE001 - an API this torch lacks
            return type(e).__name__
    C = torch._C
    return {"function modes": call(C._len_torch_function_stack), "dispatch modes": call(C._len_torch_dispatch_stack),
            "grad mode": torch.is_grad_enabled(), "inference mode": torch.is_inference_mode_enabled(),
            "default dtype": str(torch.get_default_dtype()), "default device": str(call(torch.get_default_device)),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "matmul precision": torch.get_float32_matmul_precision(),
            "autocast": (call(torch.is_autocast_enabled, "cpu"), call(torch.is_autocast_enabled, "cuda"))}


def _tampered(torch, snap: dict[str, Any]) -> list[str]:
    now = _integrity_snapshot(torch)
    out = [k for k, v in snap.items() if k != "torch state" and now.get(k) is not v
           and not (k == "manual_seed" and _dynamo_seed_wrap(torch, now[k], v))]
    state, was = _torch_state(torch), snap.get("torch state", {})
    return out + [f"torch state: {k} {was[k]!r} -> {v!r}" for k, v in state.items() if k in was and v != was[k]]


def _dynamo_seed_wrap(torch, now, before) -> bool:
    """Whether torch.manual_seed is torch._dynamo's wrap of the function the snapshot took. Importing
    torch._dynamo wraps it (torch/_dynamo/__init__.py), and a torch call an honest candidate makes may
    import it lazily; the worker no longer imports it at start (3.8-5.9 s of a GPU worker's 7.5-12.3 s
    start on an H200, judge_start.json) to settle the wrap before the snapshot. The wrap is told apart
    from a candidate's own function by its code object (torch._disable_dynamo's inner, which nothing
    else has) and the function it closes over."""
    make = getattr(torch, "_disable_dynamo", None)
    if make is None or getattr(now, "__wrapped__", None) is not before:
        return False
    code = getattr(now, "__code__", None)
    return code is make(_no_op).__code__ and any(
        getattr(c, "cell_contents", None) is before for c in (getattr(now, "__closure__", None) or ()))


def _no_op():
    return None


def _tensors_of(torch, model) -> list:
    """Every parameter, buffer and tensor attribute of a model and its submodules, read from their dicts
    without calling anything of the candidate's (parameters() and buffers() can be overridden)."""
    out, seen, stack = [], set(), [model]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        d = object.__getattribute__(m, "__dict__")
        for key in ("_parameters", "_buffers"):
            out += [t for t in dict.values(d.get(key) or {}) if isinstance(t, torch.Tensor)]
        out += [v for v in dict.values(d) if isinstance(v, torch.Tensor)]
        stack += [c for c in dict.values(d.get("_modules") or {}) if isinstance(c, torch.nn.Module)]
    return out


def _storage_span(t) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1] and b[0] != b[1]


def _categorize_exception(e: BaseException) -> tuple[str, str]:
    from megakernel_gym.cuda.nvrtc import CudaCompileError, CudaUnavailableError
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, CudaCompileError):
        return "compile_error", getattr(e, "category", "cuda_compile")   # host_code: inline.Unsupported
    if isinstance(e, CudaUnavailableError):
        return "runtime_error", "no_gpu"
    if isinstance(e, SyntaxError):
        return "compile_error", "syntax"
    low = text.lower()
    # Triton's CompilationError and its subclasses (UnsupportedLanguageConstruct: a walrus under Triton 3.6)
    if any("compilationerror" in c.__name__.lower() for c in type(e).__mro__) or "triton" in low and "compil" in low:
        return "compile_error", "triton_compile"
    if "out of memory" in low or "allocate memory" in low or isinstance(e, MemoryError):
        return "runtime_error", "oom"
    if "illegal memory access" in low or "misaligned address" in low:
        return "runtime_error", "illegal_memory_access"
    return "runtime_error", "exception"


def handle_candidate(env: Env, msg: dict, workdir: str, counter: LaunchCounter, snap: dict) -> dict:
    torch = env.torch
    flags: list[dict] = []
    phase = "load"
    try:
        mod = env.problem(msg["problem_source"], msg["problem_name"], workdir)
    except BaseException:  # noqa: BLE001
        return {"ok": False, "error": "problem_load", "message": _tb()}
    _PENDING.clear()  # a model kept for timing belongs to the previous candidate only
    counter.fast_inline = bool(msg.get("fast_inline", True))
    counter.inline_paths = []
    key = msg["candidate_sha256"][:16]
    import time as _time
    clock = [_time.perf_counter()]
    phases: dict[str, float] = {}

    def lap(name: str) -> None:
        now = _time.perf_counter()
        phases[name] = round(phases.get(name, 0.0) + now - clock[0], 4)
        clock[0] = now
    try:
        # ModelNew, or Model where there is none: an attribute of the candidate's own module, so a
        # `Model` here is the candidate's class, never the problem's
        from megakernel_gym.rewards.anticheat import CANDIDATE_CLASSES, NO_CANDIDATE_CLASS, candidate_class
        name = msg.get("candidate_class") or candidate_class(msg["candidate_source"])
        guard = _candidate_guard(torch, msg, counter)
        if guard is None:
            cand = _load_module(msg["candidate_source"], f"mkgym_candidate_{key}", workdir, f"candidate_{key}.py")
        else:
            from megakernel_gym.rewards.guard import load_candidate
            try:
                cand = load_candidate(msg["candidate_source"], f"mkgym_candidate_{key}",
                                      os.path.join(workdir, f"candidate_{key}.py"), guard)
            except SyntaxError as e:   # the policy's refusals at compile time (parsing passed in the judge)
                return {"ok": True, "status": "rejected", "category": "guard", "reason": f"guard: {e}",
                        "flags": [{"rule": "guard", "detail": str(e)[:2000]}]}
            guard.phase = "idle"
        cls = vars(cand).get(name) if name in CANDIDATE_CLASSES else None
        if not isinstance(cls, type):
            return {"ok": True, "status": "compile_error", "category": "no_modelnew", "reason": NO_CANDIDATE_CLASS}
        lap("import")
        phase = "init"
        descs, models = [], {}   # each seed's outputs go to the channel as it finishes (one seed held at a time)
        write_outputs = snap["write_outputs"]   # the judge's, as the worker started (not what sys.modules holds now)
        channel = msg["channel"]
        launches_before = counter.total()
        ops_seen: list[str] = []
        for i, spec in enumerate(msg["specs"]):
            phase = "init"
            pair = models.get(spec["init_seed"])
            if pair is None:
                ref = env.model(mod.Model, mod, spec["init_seed"])
                with _guard_phase(guard, "init"):
                    new = env.model(cls, mod, spec["init_seed"])
                    nk = set(new.state_dict())   # the candidate's methods run in a phase of its own, never idle
                rk = set(ref.state_dict())
                if rk != nk:
                    return {"ok": True, "status": "incorrect", "category": "state_dict",
                            "reason": f"the state_dict keys of the candidate's {name} differ from the "
                                      "problem's Model's: missing "
                                      f"{sorted(rk - nk)[:8]}, unexpected {sorted(nk - rk)[:8]}; keep the "
                                      "same parameter names so the judge can load Model's weights"}
                with _guard_phase(guard, "init"):
                    new.load_state_dict(ref.state_dict(), strict=True)
                del ref
                pair = models[spec["init_seed"]] = new
            model = pair
            lap("init")
            phase = "forward"
            xs = env.inputs(mod, spec)
            pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
            inspector = Inspector(torch, counter)
            session = KernelSession(torch, judge_stream(torch)) if env.backend == "gpu" else contextlib.nullcontext()
            launched_before = counter.total()
            with torch.no_grad(), session, inspector.mode, _guard_phase(guard, "forward"):
                out = model(*xs)
            if env.backend == "gpu":
                torch.cuda.synchronize()
                flags += session.flags(_own_kernel_names(counter), launched=counter.total() > launched_before)
            ops_seen += inspector.ops
            bad_ops = inspector.forbidden()
            if bad_ops:
                flags.append({"rule": "torch_compute", "detail": f"{name}.forward ran torch compute ops: "
                              + ", ".join("aten." + o for o in bad_ops[:10])})
            try:
                outs = as_outputs(torch, out)
            except TypeError as e:
                return {"ok": True, "status": "incorrect", "category": "output_type", "reason": str(e),
                        "flags": flags}
            for j, o in enumerate(outs):
                if type(o) is not torch.Tensor:
                    flags.append({"rule": "output_type", "detail": f"output {j} is a {type(o).__name__}, "
                                  "not a plain torch.Tensor"})
                spans = [_storage_span(x) for x in xs if isinstance(x, torch.Tensor)]
                spans += [_storage_span(t) for t in _tensors_of(torch, model)]
                if any(_overlaps(_storage_span(o), s) for s in spans):
                    flags.append({"rule": "output_alias", "detail": f"output {j} shares memory with an input "
                                  "or a parameter"})
                elif o.numel() and o.untyped_storage().data_ptr() not in inspector.fresh:
                    # memory the call did not make: a buffer kept from an earlier call or __init__, wherever the
                    # candidate keeps it (red team 18: in a list, where the attribute walk above does not look)
                    flags.append({"rule": "output_alias", "detail": f"output {j} is memory allocated before this "
                                  "call (a buffer kept from an earlier call or __init__); return a tensor the call "
                                  "allocates"})
            changed = [k for k, (a, b) in enumerate(zip(xs, pristine))
                       if isinstance(a, torch.Tensor) and not (a.shape == b.shape and torch.equal(a, b))]
            if changed:
                return {"ok": True, "status": "incorrect", "category": "input_mutated",
                        "reason": f"{name}.forward modified input(s) {changed}; inputs must stay unchanged",
                        "flags": flags}
            lap("forward")
            if flags:
                break
            # bounded before anything is written: the channel is host shared memory (worker_env.outputs_over)
            over = outputs_over(outs, msg.get("max_output_bytes"), msg.get("ref_output_bytes"))
            if over:
                return {"ok": True, "status": "incorrect", "category": "output_size", "reason": over,
                        "flags": flags}
            # (written before the checks after the loop: a flagged candidate's header carries no outputs,
            # so the judge reads none of these files, and clears the channel for the next candidate)
            descs.append(write_outputs(torch, outs, channel, f"s{i}"))
            del out, outs, xs, pristine
            lap("to_channel")
        launched = counter.total() - launches_before
        if launched == 0 and not flags:
            flags.append({"rule": "no_candidate_kernel", "detail": "forward launched none of the candidate's "
                          "own kernels (Triton, load_cuda or load_inline)"})
        flags += _guard_flags(guard)
        tampered = _tampered(torch, snap)
        if tampered or not counter.intact():
            flags.append({"rule": "monkeypatch", "detail": "the candidate replaced judge-visible functions or left torch's state changed: "
                          + ", ".join(tampered or ["kernel launch hooks"])})
        header: dict[str, Any] = {"ok": True, "status": "ran", "flags": flags, "phases": phases,
                                  "launches": launched, "inline_paths": counter.inline_paths}
        if flags:
            return header
        header["outputs"] = descs
        if env.backend == "gpu":
            # kept for the "time" command, which the judge sends once it holds the GPU
            first = msg["specs"][0]["init_seed"]
            _PENDING.clear()
            _PENDING.update(sha=msg["candidate_sha256"], model=models[first], mod=mod, channel=channel,
                            specs=[sp for sp in msg["specs"] if sp["init_seed"] == first],
                            max_output_bytes=msg.get("max_output_bytes"), ref_output_bytes=msg.get("ref_output_bytes"))
        return header
    except BaseException as e:  # noqa: BLE001 - the candidate is untrusted; every failure is a result
        if isinstance(e, (KeyboardInterrupt, SystemExit)) and not isinstance(e, SystemExit):
            raise
        status, category = _categorize_exception(e)
        if isinstance(e, SystemExit):
            status, category = "runtime_error", "exit"
        flags += _guard_flags(_GUARD.get("guard"))
        log = getattr(e, "log", None)
        return {"ok": True, "status": status, "category": category, "phase": phase, "flags": flags,
                "reason": f"{type(e).__name__} during {phase}: {str(e)[:2000]}",
                "compile_log": log, "traceback": _tb(), "inline_paths": counter.inline_paths}


_PENDING: dict[str, Any] = {}
_GUARD: dict[str, Any] = {}
_DEVICE: dict[str, Any] = {}   # what the worker found of its GPU at start (pageable_unreachable)


def _candidate_guard(torch, msg: dict, counter: "LaunchCounter"):
    """This worker's run-time guard (rewards/guard.py), reset for a new candidate; None when the judge
    turned it off (tests of the layers below it)."""
    if not msg.get("python_guard", True):
        _GUARD.clear()
        counter.refuse = None
        return None
    from megakernel_gym.rewards.guard import Guard
    guard = _GUARD.get("guard")
    if guard is None:
        guard = _GUARD["guard"] = Guard(torch)
        guard.install_checks(exempt=lambda: counter.moving_args > 0)
    counter.refuse = guard.refuse
    guard.reset()
    return guard


class _guard_phase:
    """What the candidate's code is doing now, for the rules that depend on it (torch.randn in
    __init__, not in forward; torch's layers built in __init__, never called in forward)."""

    def __init__(self, guard, phase: str):
        self.guard, self.phase = guard, phase

    def __enter__(self):
        if self.guard is not None:
            self.guard.phase = self.phase

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.phase = "idle"


def _guard_flags(guard) -> list[dict]:
    """Every refusal of the guard is a rejection, whether or not the candidate caught the exception."""
    if guard is None or not guard.refusals:
        return []
    seen = list(dict.fromkeys(guard.refusals))
    return [{"rule": "guard", "detail": "; ".join(seen[:5])[:2000]}]


def timed_spec(fresh: dict, k: int) -> dict:
    """The inputs of timed call k (warm-up calls have k < 0): a seed of their own, derived from the judge's
    secret base, so that no timed call repeats a checked call's values or another timed call's (an output
    cache keyed by input values never hits, on every problem); the reference worker rebuilds them from the
    same spec to re-check a sample."""
    seed = (int(fresh["seed"]) + 0x9E3779B97F4A7C15 * (k + 4096)) % (1 << 62)
    ts = fresh["transforms"]
    return {"seed": seed, "init_seed": fresh["init_seed"], "transform": list(ts[k % len(ts)]), "cache": False,
            "label": f"timed#{k}"}


class _TimedOutputOver(Exception):
    """A timed call's outputs past the size bound (worker_env.outputs_over): ends the timing."""


def handle_time(env: Env, msg: dict, workdir: str, counter: LaunchCounter, snap: dict) -> dict:
    """GPU phase of a candidate that passed correctness: timing on fresh inputs (timed_spec), every
    kernel of every timed call accounted (KernelSession), and the outputs of a secret sample of timed
    calls sent to the channel for re-checking. The judge holds the device for this command alone."""
    # the judge's own, as the worker started: not what sys.modules or those modules hold now
    write_outputs, time_gpu = snap["write_outputs"], snap["time_gpu"]
    torch = env.torch
    if _PENDING.get("sha") != msg.get("candidate_sha256"):
        return {"ok": False, "error": "worker", "message": "time: no candidate passed correctness here"}
    model, mod, channel = _PENDING["model"], _PENDING["mod"], _PENDING["channel"]
    flags: list[dict] = []
    phases: dict[str, float] = {}
    import time as _time
    header: dict[str, Any] = {"ok": True, "status": "ran", "flags": flags, "phases": phases}
    try:
        guard = _GUARD.get("guard")
        side = judge_stream(torch)
        fresh = msg["fresh"]

        def prepare(k):   # on the judge's own stream: its kernels are told apart from the candidate's
            with torch.cuda.stream(side):
                return env.inputs(mod, timed_spec(fresh, k))
        def call(xs):   # the guard's forward rules hold for the candidate's call, not for the judge's work around it
            with _guard_phase(guard, "forward"):
                return model(*xs)

        # files of this timing call's own (the judge's prefix): a re-measure must not overwrite the outputs of
        # the run it may keep
        prefix = msg.get("recheck_prefix", "r")
        spent = [0.0]
        # this timing's outputs held in host memory, by reservoir slot, until the judge asks for them (write_kept)
        held: dict | None = {} if _DEVICE.get("pageable_unreachable") else None
        if held is not None:
            _PENDING.setdefault("held", {})[prefix] = held

        def keep(out, slot):
            """A kept call's outputs, copied out of the GPU as the call has ended (before any later call of the
            candidate's, on the judge's stream): out of the reach of its kernels, which could write a copy kept on
            the GPU (red team 22) as they could the outputs themselves (red team 21). A copy in the worker's
            pageable memory where the GPU cannot reach it and it is small (correctness.HOLD_BYTES), written to
            the channel when the judge has given the GPU back; else written to the channel now. The checked
            calls' outputs were within the size bound; a timed call's may not be."""
            t = _time.perf_counter()
            with torch.cuda.stream(side):
                outs = as_outputs(torch, out)
                over = outputs_over(outs, _PENDING.get("max_output_bytes"), _PENDING.get("ref_output_bytes"))
                if over:
                    raise _TimedOutputOver(over)
                if held is not None and sum(o.numel() * o.element_size() for o in outs) <= snap["HOLD_BYTES"]:
                    held[slot] = snap["hold_outputs"](torch, outs, f"{prefix}{slot}", held.get(slot))
                    descs = [d for d, _ in held[slot]]
                else:
                    if held is not None:
                        held.pop(slot, None)   # (this slot's files are written now, not later)
                    descs = write_outputs(torch, outs, channel, f"{prefix}{slot}")
            spent[0] += _time.perf_counter() - t
            return descs
        t1 = _time.perf_counter()
        over = None
        session = KernelSession(torch, side)
        try:
            with torch.no_grad(), session:
                stats = time_gpu(torch, call, prepare, keep_outputs=1, sample=int(msg.get("sample", 0)),
                                 judge_stream=side, keep=keep, **msg["timing"])
        except _TimedOutputOver as e:
            over = str(e)
        phases["timing"] = round(_time.perf_counter() - t1 - spent[0], 4)
        phases["to_channel"] = round(spent[0], 4)
        flags += _guard_flags(guard)
        flags += session.flags(_own_kernel_names(counter), launched=True)
        header["kernels"] = sorted(session.kernels)[:50]
        if flags:                                     # a flag first, as for the calls that ended the timing
            return header
        if over:
            return {"ok": True, "status": "incorrect", "category": "output_size", "phase": "timing",
                    "reason": f"a timed call: {over}", "flags": flags}
        kept = stats.pop("kept")
        header["timing"] = stats
        header["recheck"] = [{"k": k} for k, _ in kept]
        header["recheck_outputs"] = [descs for _, descs in kept]
        header["held"] = bool(held)    # some of their files come with write_kept
        tampered = _tampered(torch, snap)
        if tampered:
            flags.append({"rule": "monkeypatch", "detail": "judge-visible functions replaced or torch's state changed during timing: "
                          + ", ".join(tampered)})
        return header
    except BaseException as e:  # noqa: BLE001 - still the candidate's code running
        if isinstance(e, KeyboardInterrupt):
            raise
        status, category = _categorize_exception(e)
        flags += _guard_flags(_GUARD.get("guard"))
        return {"ok": True, "status": status, "category": category, "phase": "timing", "flags": flags,
                "reason": f"{type(e).__name__} during timing: {str(e)[:2000]}", "traceback": _tb()}


def handle_write_kept(msg: dict, snap: dict) -> dict:
    """The timed outputs one timing call held (handle_time's keep), written to the channel, sent once the judge
    has given the GPU back (no candidate code runs between the timing and this): every other timing's held
    copies go too."""
    held = _PENDING.pop("held", {}).get(msg.get("prefix"))
    channel = _PENDING.get("channel")
    if held is None or channel is None:
        return {"ok": False, "error": "worker", "message": f"write_kept: no timing held {msg.get('prefix')!r}"}
    import time as _time
    t = _time.perf_counter()
    for outs in held.values():
        snap["write_held"](outs, channel)
    return {"ok": True, "status": "ran", "flags": [], "phases": {"to_channel": round(_time.perf_counter() - t, 4)}}


# ---------------------------------------------------------------------------------------
# main loop


def worker_main(conn, role: str, backend: str, device_index: int, log_path: str, workdir: str,
                drop_privileges: bool, hide: list[str] | None = None, slot: int = 0) -> None:
    import time as _time
    phases, t_phase = {}, _time.perf_counter()

    def phase(name: str) -> None:     # seconds since the last phase (the ready header's startup_s)
        nonlocal t_phase
        now = _time.perf_counter()
        phases[name] = round(now - t_phase, 3)
        t_phase = now

    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    os.dup2(log_fd, 1)  # nothing a candidate prints can reach the judge's stdout
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    judge_pid = os.getppid()
    parent_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    _scrub_environment()
    # least privilege (rewards/isolation.py), first, with one thread: every thread and process the
    # worker starts later inherits every layer. The store's paths are forgotten here.
    from megakernel_gym.rewards import isolation as iso
    store_paths = hide if isinstance(hide, list) else list(hide or [])
    layers, missing = iso.isolate(role, backend, workdir, store_paths, judge_pid,
                                  become_nobody=role == "candidate" and drop_privileges)
    del hide, store_paths
    phase("isolate")
    _forget_spawn_arguments()
    if not layers:
        _watch_parent(judge_pid)
    if role == "candidate":
        iso.scratch_environment(workdir)   # TMPDIR, HOME and every cache in the only writable folder
    else:
        os.environ["TRITON_CACHE_DIR"] = os.path.join(workdir, "triton")
        os.environ["MKGYM_CUDA_CACHE"] = os.path.join(workdir, "cubin")
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(workdir, "torch_extensions")
    if backend == "gpu":
        _pin_cpu(role, slot)
    if backend == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(device_index, parent_visible)
    _limit_memory(backend)
    phase("setup")
    import torch
    phase("import_torch")
    if backend == "cpu":
        torch.set_num_threads(1)
    env = Env(backend)
    counter = snap = None
    info: dict[str, Any] = {"ok": True, "role": role, "pid": os.getpid(), "torch": torch.__version__}
    try:
        if backend == "gpu":
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA GPU visible to the worker")
            torch.cuda.init()
            torch.empty(1, device="cuda")
            info["device"] = torch.cuda.get_device_name(0)
            from megakernel_gym.rewards.correctness import pageable_unreachable
            _DEVICE["pageable_unreachable"] = info["pageable_unreachable"] = pageable_unreachable(torch)
        else:
            info["device"] = "cpu"
        phase("cuda_init")
        import triton  # noqa: F401  (imported before the candidate, so hooks are in place)
        phase("import_triton")
        if role == "candidate":
            counter = LaunchCounter(torch)
            snap = _integrity_snapshot(torch)
            snap["torch state"] = _torch_state(torch)
            phase("launch_counter")
            os.makedirs(os.path.join(workdir, "triton"), exist_ok=True)
            os.makedirs(os.path.join(workdir, "cubin"), exist_ok=True)
            os.makedirs(os.path.join(workdir, "torch_extensions"), exist_ok=True)
            os.makedirs(os.path.join(workdir, "out"), exist_ok=True)  # the output channel
            if backend == "cpu":   # set up: from here on no new process, thread or socket (isolation.py)
                try:
                    layers.append(iso.forbid_new_tasks())
                except (OSError, ImportError, RuntimeError) as e:
                    missing.append(f"seccomp-cpu ({type(e).__name__}: {e})")
        phase("rest")
        info["startup_s"] = phases
        info["isolation"] = ", ".join(layers) or "none"
        info["isolation_missing"] = missing
        info["dropped_privileges"] = any(layer.startswith("no-caps (nobody") for layer in layers)
    except BaseException:  # noqa: BLE001
        send(conn, {"ok": False, "error": "worker_start", "message": _tb()})
        return
    send(conn, info)
    while True:
        try:
            msg = recv(conn)
        except (EOFError, OSError, ValueError):
            return
        cmd = msg.get("cmd")
        if cmd == "exit":   # no interpreter teardown (torch's and CUDA's took a one-off judge ~1 s here)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        handlers = {"meta": handle_meta, "compare": handle_compare, "baselines": handle_baselines,
                    "check": handle_check}
        try:
            if cmd == "release" and role == "candidate":
                _PENDING.clear()   # the model kept for timing: its evaluation is over (after_command frees it)
                reply = {"ok": True}
            elif cmd == "write_kept" and role == "candidate":
                reply = handle_write_kept(msg, snap)
            elif cmd in ("candidate", "time") and role == "candidate":
                fn = handle_candidate if cmd == "candidate" else handle_time
                reply = fn(env, msg, workdir, counter, snap)
            elif cmd in handlers and role == "reference":
                reply = handlers[cmd](env, msg, workdir)
            else:
                reply = {"ok": False, "error": "bad_command", "message": f"{cmd!r} is not a {role} command"}
        except BaseException:  # noqa: BLE001
            reply = {"ok": False, "error": "worker", "message": _tb()}
        after_command(env, role, msg)
        sys.stdout.flush()
        sys.stderr.flush()
        send(conn, reply)
