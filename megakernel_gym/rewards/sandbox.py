"""What runs inside a judge worker process: the problem's reference, or the candidate.

Two roles, always in different processes, so reference outputs never exist where the
candidate runs:
- `reference`: runs the problem's Model on seeded inputs and times the baselines.
- `candidate`: runs ModelNew under inspection (aten ops seen, fresh allocations poisoned,
  launches counted, inputs checked unchanged), then times it on the GPU.

Messages are JSON over a private pipe, never pickles: a hostile worker cannot make the judge
run code by what it sends. Bulk data (outputs) goes through a file channel as raw bytes with
a JSON description (see correctness.py).
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from typing import Any

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
POISON_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
# Kernel names that belong to vendor libraries, not to the candidate.
# (Not at::native: allowed ops such as torch.zeros or .contiguous() launch those.)
LIBRARY_KERNEL_PATTERNS = ("gemm", "cublas", "cudnn", "cutlass", "xmma", "sgemm", "hgemm", "gemv", "splitkreduce")


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


def _load_module(source: str, name: str, workdir: str, filename: str):
    """Import source from a real file: Triton's @jit reads its function's source back."""
    path = os.path.join(workdir, filename)
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------
# inputs, shared by both roles so the same seed gives the same tensors in each


class Env:
    def __init__(self, backend: str):
        import torch
        self.torch = torch
        self.backend = backend
        self.device = torch.device("cuda", 0) if backend == "gpu" else torch.device("cpu")
        self.problems: dict[str, Any] = {}
        from collections import OrderedDict
        self.refs: OrderedDict[str, list] = OrderedDict()  # reference role: outputs by spec
        self.models: dict = {}
        self.ref_bytes = 0
        # the reference outputs and models a reference worker keeps between commands (fixed seeds' outputs,
        # a problem's model): at most RESIDENT_BYTES, which admission reserves for every slot
        # (rewards/admission.py); a larger problem's are built again each time (a few ms of GPU work)
        from megakernel_gym.rewards.admission import RESIDENT_BYTES
        self.ref_limit = RESIDENT_BYTES
        # reference role: (problem key, the baselines' model, its torch.compile) from a baselines call with
        # compile_only until the timing call that uses it (handle_baselines)
        self.compiled = None

    @staticmethod
    def problem_sha(source: str) -> str:
        from megakernel_gym.rewards.problem import sha256
        return sha256(source)

    def problem(self, source: str, name: str, workdir: str):
        from megakernel_gym.rewards.problem import sha256
        key = sha256(source)
        mod = self.problems.get(key)
        if mod is None:
            mod = _load_module(source, f"mkgym_problem_{key[:16]}", workdir, f"problem_{key[:16]}.py")
            sizes = getattr(mod, "CPU_SIZES", None) if self.backend == "cpu" else getattr(mod, "GPU_SIZES", None)
            for k, v in (sizes or {}).items():
                setattr(mod, k, v)
            self.problems[key] = mod
        return mod

    def inputs(self, mod, spec: dict) -> list:
        torch = self.torch
        torch.manual_seed(spec["seed"])
        with torch.device(self.device):
            raw = list(mod.get_inputs())
        out = []
        kind, a, b = spec["transform"]
        for x in raw:
            if isinstance(x, torch.Tensor):
                x = x.to(self.device)
                if x.is_floating_point() and kind != "plain":
                    x = x * a + b
                x = x.contiguous()
            out.append(x)
        return out

    def perturbed(self, base: list, scale: float) -> list:
        """Fresh content for a timed call: floating inputs scaled by `scale` (exact IEEE op)."""
        torch = self.torch

        def fresh(x):
            if not isinstance(x, torch.Tensor):
                return x
            if scale == 1.0 or not x.is_floating_point():
                return x.clone()
            if x.element_size() == 1:   # float8 has no multiply kernel; its problems allow no scaling anyway
                return (x.float() * scale).to(x.dtype)
            return x * scale
        return [fresh(x) for x in base]

    def model(self, cls, mod, init_seed: int):
        """cls(*get_init_inputs()) seeded by init_seed, on the judge's device. Its parameters are drawn
        on the device, as get_inputs' tensors are: on an H100, drawing a 32000x4096 table on the host
        (Model and ModelNew, for the fixed and the secret seed, in both workers) took 25 of an
        evaluation's 29 s. Both workers build every model here, so the reference and the candidate get
        the same weights. A class whose __init__ needs host tensors (numpy...) is built on the host
        instead, as before."""
        torch = self.torch
        if self.device.type != "cpu":
            try:
                torch.manual_seed(init_seed)
                init = list(mod.get_init_inputs())
                with torch.device(self.device):
                    return cls(*init).to(self.device).eval()
            except Exception:  # noqa: BLE001 - built again on the host; an error there is the real one
                pass
        torch.manual_seed(init_seed)
        init = list(mod.get_init_inputs())
        m = cls(*init)
        return m.to(self.device).eval()


def as_outputs(torch, out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise TypeError(f"forward returned {type(out).__name__}; expected a tensor or a tuple of tensors")


def _tb(limit: int = 6000) -> str:
    return traceback.format_exc()[-limit:]


# ---------------------------------------------------------------------------------------
# reference role


def handle_meta(env: Env, msg: dict, workdir: str) -> dict:
    """What the judge needs to know of a problem before running anything: tolerances,
    allowed input transforms, the roofline counts."""
    try:
        mod = env.problem(msg["problem_source"], msg["problem_name"], workdir)
        meta = {"flops": float(mod.FLOPS()) if callable(getattr(mod, "FLOPS", None)) else None,
                "bytes": float(mod.BYTES()) if callable(getattr(mod, "BYTES", None)) else None,
                "atol": getattr(mod, "ATOL", None), "rtol": getattr(mod, "RTOL", None),
                "input_transforms": list(getattr(mod, "INPUT_TRANSFORMS", ("scale", "shift")))}
        for k in ("atol", "rtol", "flops", "bytes"):
            if meta[k] is not None and not isinstance(meta[k], (int, float)):
                raise TypeError(f"{k.upper()} must be a number, got {type(meta[k]).__name__}")
        # sized on the meta device: the cpu backend's host limit, and a GPU's admission (rewards/admission.py)
        fp = meta["footprint"] = footprint(env.torch, mod) if msg.get("footprint", True) else None
        over = _over_host(fp) if fp is not None and env.backend == "cpu" else ""
        if over:
            return {"ok": False, "error": "too_large", "message": over}
        if msg.get("spec"):
            # run the reference once: a problem that cannot produce outputs fails here, as a
            # problem error, before any candidate is blamed for it
            _reference_outputs(env, mod, env.problem_sha(msg["problem_source"]), msg["spec"])
        return {"ok": True, "meta": meta}
    except BaseException:  # noqa: BLE001 - the problem file is untrusted input
        return {"ok": False, "error": "problem_load", "message": _tb()}


def tensor_bytes(ts) -> int:
    """The bytes of a list of tensors' elements."""
    return sum(t.numel() * t.element_size() for t in ts)


def footprint(torch, mod) -> dict | None:
    """A problem's bytes at its sizes, found without allocating them: its Model built and run on the
    meta device (shapes and dtypes only). {"inputs", "params" (parameters and buffers), "outputs"},
    or None where the problem cannot run there (data-dependent code, host tensors in __init__...)."""
    def nbytes(ts) -> int:
        return tensor_bytes([t for t in ts if isinstance(t, torch.Tensor)])
    try:
        torch.manual_seed(0)
        with torch.device("meta"):
            model = mod.Model(*list(mod.get_init_inputs()))
            xs = list(mod.get_inputs())
            with torch.no_grad():
                outs = as_outputs(torch, model(*xs))
        if any(isinstance(t, torch.Tensor) and not t.is_meta for t in [*xs, *outs]):
            return None
        return {"inputs": nbytes(xs), "params": nbytes([*model.parameters(), *model.buffers()]),
                "outputs": nbytes(outs)}
    except Exception:  # noqa: BLE001 - the problem's own code; its real run reports its errors
        return None


# What the cpu backend's reference worker holds at once for one seed: the inputs and their scaled copy,
# the parameters, its outputs and the candidate's read back beside them (intermediates not counted).
def host_need(fp: dict) -> int:
    return 2 * fp["inputs"] + fp["params"] + 2 * fp["outputs"]


def _over_host(fp: dict) -> str:
    """Why a problem cannot run on this CPU worker (its address-space cap, _limit_memory), or ""."""
    try:
        import resource
        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, ValueError, OSError):
        return ""
    need = host_need(fp)
    if cap == resource.RLIM_INFINITY or need <= cap:
        return ""
    gib = 1 << 30
    return (f"this problem needs about {need / gib:.1f} GiB on the host at its sizes (inputs "
            f"{fp['inputs'] / gib:.2f} GiB twice, parameters {fp['params'] / gib:.2f} GiB, outputs "
            f"{fp['outputs'] / gib:.2f} GiB twice), over the cpu backend's {cap / gib:.1f} GiB per worker: "
            "judge it with backend='gpu', or give the problem CPU_SIZES (smaller sizes the cpu backend uses)")


def _spec_key(sha: str, spec: dict) -> str:
    return json.dumps([sha, spec["seed"], spec["init_seed"], spec["transform"], spec.get("scale")])


def _reference_outputs(env: Env, mod, sha: str, spec: dict) -> list:
    """The problem's outputs for one spec, on the device; fixed-seed ones stay cached."""
    torch = env.torch
    key = _spec_key(sha, spec)
    hit = env.refs.get(key)
    if hit is not None:
        env.refs.move_to_end(key)
        return hit
    mkey = (sha, spec["init_seed"])
    model = env.models.get(mkey)
    if model is None:
        model = env.model(mod.Model, mod, spec["init_seed"])
        if spec.get("cache", True) and tensor_bytes([*model.parameters(), *model.buffers()]) <= env.ref_limit:
            env.models[mkey] = model
    base = env.inputs(mod, spec)
    xs = env.perturbed(base, spec["scale"]) if spec.get("scale") is not None else base
    with torch.no_grad():
        outs = [t.detach() for t in as_outputs(torch, model(*xs))]
    if spec.get("cache", True) and tensor_bytes(outs) <= env.ref_limit:
        env.refs[key] = outs
        env.ref_bytes += tensor_bytes(outs)
        trim_resident(env)
    return outs


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


def trim_resident(env: Env) -> None:
    """Keep what a reference worker holds between commands within env.ref_limit: the oldest outputs go
    first, then the models (each an nn.Module's parameters and buffers)."""
    models = sum(tensor_bytes([*m.parameters(), *m.buffers()]) for m in env.models.values())
    while env.ref_bytes + models > env.ref_limit and env.refs:
        _, old = env.refs.popitem(last=False)
        env.ref_bytes -= tensor_bytes(old)
    if models > env.ref_limit:
        env.models.clear()


def handle_compare(env: Env, msg: dict, workdir: str) -> dict:
    """Compare the candidate's outputs (files in msg["channel"]) with the references, here."""
    from megakernel_gym.rewards.correctness import compare, read_output
    torch = env.torch
    try:
        mod = env.problem(msg["problem_source"], msg["problem_name"], workdir)
    except BaseException:  # noqa: BLE001
        return {"ok": False, "error": "problem_load", "message": _tb()}
    sha = env.problem_sha(msg["problem_source"])
    results = []
    for spec, descs in zip(msg["specs"], msg["outputs"]):
        try:
            refs = _reference_outputs(env, mod, sha, spec)
        except BaseException:  # noqa: BLE001
            return {"ok": False, "error": "problem_run", "message": _tb()}
        try:
            if not isinstance(descs, list) or len(descs) != len(refs):
                n = len(descs) if isinstance(descs, list) else "no"
                results.append({"ok": False, "why": f"returned {n} output(s), expected {len(refs)}"})
                continue
            outs, why = [], None
            for j, (d, r) in enumerate(zip(descs, refs)):
                tag = f"output {j}" if len(refs) > 1 else "output"
                if d.get("dtype") != str(r.dtype).replace("torch.", ""):
                    why = f"{tag} has dtype {d.get('dtype')}, expected {str(r.dtype).replace('torch.', '')}"
                elif d.get("shape") != list(r.shape):
                    why = f"{tag} has shape {tuple(d.get('shape') or ())}, expected {tuple(r.shape)}"
                elif d.get("stride") != list(r.stride()):
                    why = (f"{tag} strides {d.get('stride')} differ from the reference's {list(r.stride())} "
                           "(return a contiguous tensor)")
                if why:
                    break
                outs.append(read_output(torch, d, msg["channel"], r.device))
            res = {"ok": False, "why": why} if why else compare(outs, refs, msg.get("atol"), msg.get("rtol"),
                                                                msg.get("tolerance"))
        except (ValueError, OSError, RuntimeError) as e:
            res = {"ok": False, "why": f"unreadable output: {e}"}
        results.append(res)
    return {"ok": True, "results": results}


def handle_check(env: Env, msg: dict, workdir: str) -> dict:
    """The problem filters (rewards/filters.py): would a trivial kernel pass this problem?"""
    from megakernel_gym.rewards.filters import run_filters
    torch = env.torch
    try:
        mod = env.problem(msg["problem_source"], msg["problem_name"], workdir)
    except BaseException:  # noqa: BLE001
        return {"ok": False, "error": "problem_load", "message": _tb()}

    def run(model, xs):
        with torch.no_grad():
            return [t.detach() for t in as_outputs(torch, model(*xs))]
    try:
        report = run_filters(env, mod, msg["specs"], msg.get("atol"), msg.get("rtol"), run, msg.get("tolerance"))
    except BaseException:  # noqa: BLE001 - the problem file is untrusted input
        return {"ok": False, "error": "problem_run", "message": _tb()}
    finally:
        if env.backend == "gpu":
            torch.cuda.empty_cache()
    return {"ok": True, "report": report}


# The inputs the baselines are timed on: every seed's while they come to at most this many bytes, else
# the first seed's alone. KernelBench's level 1 has 4-16 GiB inputs: five seeds of one held at once (80
# GiB) is what ran an H100 out of memory; a timed call gets fresh content either way (Env.perturbed), and an
# input that size is far larger than L2, so holding one base loses nothing.
BASELINE_BASES_BYTES = 1 << 30


def _baseline_bases(env: Env, mod, specs: list) -> list:
    bases = [env.inputs(mod, specs[0])]
    per = tensor_bytes([x for x in bases[0] if isinstance(x, env.torch.Tensor)])
    if per * len(specs) <= BASELINE_BASES_BYTES:
        bases += [env.inputs(mod, s) for s in specs[1:]]
    return bases


def _free_cached(torch) -> None:
    """Give the allocator's cached blocks back to the driver where they are large: the judges beside this
    one on the GPU are admitted against its memory (rewards/admission.py), not against what a worker
    keeps reserved after its peak (admission.LINGER_BYTES is what it may keep)."""
    from megakernel_gym.rewards.admission import LINGER_BYTES
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > LINGER_BYTES:
        torch.cuda.empty_cache()


def handle_baselines(env: Env, msg: dict, workdir: str) -> dict:
    """Time eager PyTorch, CUDA-graph replay of eager, and torch.compile on the problem.

    With msg["compile_only"] the problem's torch.compile is built and run once, untimed, and kept for the
    timing call that follows: the judge asks for it outside its GPU lock, since inductor's compile is
    seconds to minutes of host work that would otherwise stall every other slot's timing. The answer
    carries the worker's peak GPU memory since the previous baselines call (its reference run, compile
    and timing), and resets it."""
    from megakernel_gym.cuda.timing import capture_cuda_graph, time_gpu
    torch = env.torch
    mod = env.problem(msg["problem_source"], msg["problem_name"], workdir)
    specs = msg["specs"]
    key = (env.problem_sha(msg["problem_source"]), specs[0]["init_seed"])
    compiled_for = env.compiled
    if compiled_for is None or compiled_for[0] != key:
        # A problem may time a `Baseline` (same constructor and weights) in place of its Model: a
        # reference computed more accurately than the fast eager code (level 5) would be an unfair baseline.
        model = env.model(getattr(mod, "Baseline", mod.Model), mod, specs[0]["init_seed"])
        try:
            compiled = torch.compile(model)
        except Exception as e:  # noqa: BLE001
            compiled = e
        env.compiled = compiled_for = (key, model, compiled)
    _, model, compiled = compiled_for
    compiled_for = None
    if msg.get("compile_only"):
        if not isinstance(compiled, Exception):
            try:
                with torch.no_grad():
                    compiled(*env.inputs(mod, specs[0]))
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - the timing call reports it
                env.compiled = (key, model, e)
        return {"ok": True}         # kept for the timing call alone (after_command drops it after any other)
    bases = _baseline_bases(env, mod, specs)
    scales = msg["scales"]
    prepare = lambda k: env.perturbed(bases[k % len(bases)], scales[k % len(scales)])  # noqa: E731
    results: dict[str, Any] = {}
    with torch.no_grad():
        results["eager"] = time_gpu(torch, lambda xs: model(*xs), prepare, **msg["timing"])
        # CUDA graph of eager: static input buffers, refilled outside the timed region.
        try:
            static = [x.clone() if isinstance(x, torch.Tensor) else x for x in bases[0]]
            graph = capture_cuda_graph(torch, model, static)

            def refill(k):   # prepare(k)'s values, written in place: no third copy of the inputs
                scale = scales[k % len(scales)]
                for dst, src in zip(static, bases[k % len(bases)]):
                    if not isinstance(dst, torch.Tensor):
                        continue
                    if scale != 1.0 and dst.is_floating_point() and dst.element_size() == 1:
                        src = env.perturbed([src], scale)[0]   # float8: scaled through float32, as perturbed does
                    dst.copy_(src)
                    if scale != 1.0 and dst.is_floating_point() and dst.element_size() > 1:
                        dst.mul_(scale)
                return None
            results["cuda_graph"] = time_gpu(torch, lambda _: graph.replay(), refill, **msg["timing"])
        except Exception as e:  # noqa: BLE001 - some problems cannot be captured; say so
            results["cuda_graph"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        static = graph = None
        try:
            if isinstance(compiled, Exception):
                raise compiled
            results["torch_compile"] = time_gpu(torch, lambda xs: compiled(*xs), prepare, **msg["timing"])
        except Exception as e:  # noqa: BLE001
            results["torch_compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    for r in results.values():
        r.pop("kept", None)
    memory = {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved()}
    torch.cuda.reset_peak_memory_stats()   # (after_command gives the cache back)
    props = torch.cuda.get_device_properties(0)
    return {"ok": True, "baselines": results, "device": props.name, "memory": memory}


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
                if name in POISON_OPS and isinstance(out, torch.Tensor):
                    inspector.poison(out)
                return out

        self.torch = torch
        self.ops: list[str] = []
        self.mode = _Mode()

    def poison(self, t) -> None:
        torch = self.torch
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).max)

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
            classes.append(InterpretedFunction)
            _mark_argument_moves(interpreter, self)
            _interpret_own_source(interpreter)
            if os.environ.get("TRITON_INTERPRET") == "1":
                _autotune_without_benchmarks()
        except ImportError:
            pass
        for cls in classes:
            orig = cls.run

            def run(self, *a, __orig=orig, **kw):
                _check_launch_args(self, a, kw, counter)
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
            return _CountingModule(mod, counter)
        cpp.load_inline = load_inline
        self.installed = {c: c.run for c in classes}
        self.installed_inline = load_inline

    def total(self) -> int:
        return self.triton + self.inline + self.nvrtc.launch_count()

    def intact(self) -> bool:
        import torch.utils.cpp_extension as cpp
        return all(c.run is f for c, f in self.installed.items()) and cpp.load_inline is self.installed_inline


def _interpret_own_source(interpreter) -> None:
    """Triton's CPU interpreter re-reads a @triton.jit function's source from its file and executes it:
    from the last line of the function's text that starts with `def ` (a line inside a string constant
    would do), with the function's module globals, into which it first copies its own. Here it takes the
    function's own definition from the file's syntax tree (the text the guard's jit-body rules checked),
    and executes it in a copy of the globals, so that nothing of the interpreter's lands in the candidate's
    namespace."""
    rewriter = getattr(interpreter, "FunctionRewriter", None)
    if rewriter is None or not hasattr(rewriter, "ast_transformer"):
        return
    import ast as _ast
    import linecache

    def rewrite_ast(self):
        fn = self.fn
        code = fn.__code__
        text = "".join(linecache.getlines(code.co_filename)) or open(code.co_filename).read()
        defs = [n for n in _ast.parse(text).body if isinstance(n, _ast.FunctionDef) and n.name == fn.__name__
                and (min([d.lineno for d in n.decorator_list] + [n.lineno]) <= code.co_firstlineno <= n.lineno)]
        if len(defs) != 1:
            raise RuntimeError(f"the @triton.jit function {fn.__name__} has no definition of its own in "
                               f"{code.co_filename}")
        node = defs[0]
        node.decorator_list = []
        tree = _ast.Module(body=[node], type_ignores=[])
        tree = self.ast_transformer.visit(tree)
        _ast.fix_missing_locations(tree)
        compiled = compile(tree, filename=code.co_filename, mode="exec")
        namespace = dict(fn.__globals__)
        for key, value in vars(interpreter).items():
            namespace.setdefault(key, value)
        local = {**self.kwargs}
        exec(compiled, namespace, local)
        return local[fn.__name__]
    rewriter.rewrite_ast = rewrite_ast


def _autotune_without_benchmarks() -> None:
    """On the cpu backend Triton's interpreter cannot benchmark @triton.autotune's configs (it asks a GPU
    driver: "0 active drivers"), and no timing is claimed there anyway: every config times the same, so the
    first one runs. Correctness does not depend on which config runs."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    Autotuner._bench = lambda self, *a, **kw: [0.0, 0.0, 0.0]


def _mark_argument_moves(interpreter, counter: "LaunchCounter") -> None:
    """Triton's CPU interpreter copies a launch's tensors to numpy and back (GridExecutor._init_args_hst,
    _restore_args_dev, _implicit_cvt): the judge's own data movement, marked so that the aten watcher and
    the guard's tensor checks let it through and nothing else (a grid callable or a constexpr callable the
    candidate passes runs outside the mark)."""
    def marked(fn):
        def moving(*a, **kw):
            counter.moving_args += 1
            try:
                return fn(*a, **kw)
            finally:
                counter.moving_args -= 1
        return moving
    ge = interpreter.GridExecutor
    for name in ("_init_args_hst", "_restore_args_dev"):
        if hasattr(ge, name):
            setattr(ge, name, marked(getattr(ge, name)))
    if hasattr(interpreter, "_implicit_cvt"):
        interpreter._implicit_cvt = marked(interpreter._implicit_cvt)


_CONSTEXPR_TYPES = (int, float, bool, str, type(None))


def _check_launch_args(kernel, a, kw, counter: "LaunchCounter") -> None:
    """A launch's arguments are tensors and plain values, and its tl.constexpr arguments what a GPU compile
    can specialize on: numbers, strings, None, triton dtypes and constexprs, and @triton.jit functions.
    Under the CPU interpreter anything else (a torch tensor as a constexpr, a Python closure, an object of
    the candidate's whose `data_ptr` property Triton's argument copy would run) would run the candidate's
    Python where the judge's watchers look away."""
    import torch
    for v in list(a) + [v for k, v in kw.items() if k not in _LAUNCH_OPTIONS]:
        if not (type(v) in (torch.Tensor, torch.nn.Parameter) or _constexpr_value(v)):
            what = f"an argument of type {type(v).__name__} to the kernel {getattr(kernel, '__name__', '')}"
            hint = "kernel arguments are torch tensors, numbers, strings, None, triton dtypes or @triton.jit functions"
            if counter.refuse is not None:
                raise counter.refuse(what, hint)
            raise TypeError(f"{what}: {hint}")
    _check_constexprs(kernel, a, kw, counter)


# a launch's own keywords, not the kernel's arguments (Triton's run(..., grid=, warmup=, num_warps=...))
_LAUNCH_OPTIONS = {"grid", "warmup", "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                   "launch_cooperative_grid", "launch_pdl", "stream", "device", "device_type"}


def _check_constexprs(kernel, a, kw, counter: "LaunchCounter") -> None:
    """A launch's tl.constexpr arguments are what a GPU compile can specialize on (see _check_launch_args)."""
    fn = getattr(kernel, "fn", None)
    while fn is not None and not inspect.isfunction(fn):
        fn = getattr(fn, "fn", None)
    if fn is None:
        return
    slots = _CONSTEXPR_SLOTS.get(fn)
    if slots is None:
        import triton.language as tl
        names = list(inspect.signature(fn).parameters)
        slots = _CONSTEXPR_SLOTS[fn] = [
            (i, n) for i, n in enumerate(names)
            if (lambda ann: ann is tl.constexpr or isinstance(ann, str) and "constexpr" in ann)(
                fn.__annotations__.get(n))]
    for i, name in slots:
        if i < len(a):
            value = a[i]
        elif name in kw:
            value = kw[name]
        else:
            continue
        if not _constexpr_value(value):
            what = f"the tl.constexpr argument {name} of {fn.__name__} is a {type(value).__name__}"
            hint = "constexprs are numbers, strings, None, triton dtypes or @triton.jit functions"
            if counter.refuse is not None:
                raise counter.refuse(what, hint)
            raise TypeError(f"{what}: {hint}")


_CONSTEXPR_SLOTS: dict = {}


def _constexpr_value(value) -> bool:
    if isinstance(value, _CONSTEXPR_TYPES):
        return True
    import triton.language as tl
    from triton.runtime.jit import JITFunction
    if isinstance(value, tl.constexpr):   # tl.constexpr(v): what it holds must be a constexpr value itself
        return not isinstance(value.value, tl.constexpr) and _constexpr_value(value.value)
    if isinstance(value, (tl.dtype, JITFunction)):
        return True
    try:
        from triton.runtime.interpreter import InterpretedFunction
        return isinstance(value, InterpretedFunction)
    except ImportError:
        return False


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


def _integrity_snapshot(torch) -> dict[str, Any]:
    """Identities of the functions the judge's own measurements rely on."""
    import inspect
    import time as _time
    T = lambda name: inspect.getattr_static(torch.Tensor, name)  # noqa: E731  (no fresh bound methods)
    snap = {"perf_counter": _time.perf_counter, "equal": torch.equal, "Tensor.clone": T("clone"),
            "Tensor.cpu": T("cpu"), "manual_seed": torch.manual_seed, "save": torch.save,
            "Tensor.copy_": T("copy_"), "Tensor.__torch_dispatch__": T("__torch_dispatch__"),
            "Tensor.__torch_function__": T("__torch_function__"), "device": torch.device}
    if torch.cuda.is_available():
        E = lambda name: inspect.getattr_static(torch.cuda.Event, name)  # noqa: E731
        snap.update({"Event": torch.cuda.Event, "Event.elapsed_time": E("elapsed_time"),
                     "Event.record": E("record"), "synchronize": torch.cuda.synchronize})
    return snap


def _tampered(torch, snap: dict[str, Any]) -> list[str]:
    now = _integrity_snapshot(torch)
    return [k for k, v in snap.items() if now.get(k) is not v
            and not (k == "manual_seed" and _dynamo_seed_wrap(torch, now[k], v))]


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
    if "compilationerror" in type(e).__name__.lower() or "triton" in low and "compil" in low:
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
        from megakernel_gym.rewards.correctness import write_outputs
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
            changed = [k for k, (a, b) in enumerate(zip(xs, pristine))
                       if isinstance(a, torch.Tensor) and not (a.shape == b.shape and torch.equal(a, b))]
            if changed:
                return {"ok": True, "status": "incorrect", "category": "input_mutated",
                        "reason": f"{name}.forward modified input(s) {changed}; inputs must stay unchanged",
                        "flags": flags}
            lap("forward")
            if flags:
                break
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
            flags.append({"rule": "monkeypatch", "detail": "the candidate replaced judge-visible functions: "
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
                            specs=[sp for sp in msg["specs"] if sp["init_seed"] == first])
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


def handle_time(env: Env, msg: dict, workdir: str, counter: LaunchCounter, snap: dict) -> dict:
    """GPU phase of a candidate that passed correctness: timing on fresh inputs (timed_spec), every
    kernel of every timed call accounted (KernelSession), and the outputs of a secret sample of timed
    calls sent to the channel for re-checking. The judge holds the device for this command alone."""
    from megakernel_gym.rewards.correctness import write_outputs
    from megakernel_gym.cuda.timing import time_gpu
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
        t1 = _time.perf_counter()
        with torch.no_grad(), KernelSession(torch, side) as session:
            stats = time_gpu(torch, call, prepare, keep_outputs=1, keep_at=set(msg.get("keep_at", ())),
                             judge_stream=side, **msg["timing"])
        phases["timing"] = round(_time.perf_counter() - t1, 4)
        flags += _guard_flags(guard)
        flags += session.flags(_own_kernel_names(counter), launched=True)
        header["kernels"] = sorted(session.kernels)[:50]
        kept = stats.pop("kept")
        if flags:
            return header
        header["timing"] = stats
        header["recheck"] = [{"k": k} for k, _ in kept]
        t2 = _time.perf_counter()
        # files of this timing call's own (the judge's prefix): a re-measure must not overwrite the outputs of
        # the run it may keep
        prefix = msg.get("recheck_prefix", "r")
        header["recheck_outputs"] = [write_outputs(torch, as_outputs(torch, o), channel, f"{prefix}{i}")
                                     for i, (_, o) in enumerate(kept)]
        phases["to_channel"] = round(_time.perf_counter() - t2, 4)
        tampered = _tampered(torch, snap)
        if tampered:
            flags.append({"rule": "monkeypatch", "detail": "judge-visible functions replaced during timing: "
                          + ", ".join(tampered)})
        return header
    except BaseException as e:  # noqa: BLE001 - still the candidate's code running
        if isinstance(e, KeyboardInterrupt):
            raise
        status, category = _categorize_exception(e)
        flags += _guard_flags(_GUARD.get("guard"))
        return {"ok": True, "status": status, "category": category, "phase": "timing", "flags": flags,
                "reason": f"{type(e).__name__} during timing: {str(e)[:2000]}", "traceback": _tb()}


_JUDGE_STREAM: list = []


def judge_stream(torch):
    """The worker's own CUDA stream for the judge's work between calls (inputs, L2 flush): a kernel on it
    is the judge's, any other kernel in a session is the candidate's or an allowed call's."""
    if not _JUDGE_STREAM:
        _JUDGE_STREAM.append(torch.cuda.Stream())
    return _JUDGE_STREAM[0]


# Kernels that allowed calls launch on the candidate's behalf, by the at::native function that names them:
# the fill behind torch.zeros/full/fill_ (and the judge's poisoning of fresh allocations), the copy behind
# .contiguous()/.clone()/.to()/copy_, torch.cat's batched copy, torch.arange; and the judge's spin kernel in
# front of each timed call (torch.cuda._sleep). Accounted as those calls', not as foreign compute.
ALLOWED_CALL_KERNELS = re.compile(r"\bat::native::.*(?:FillFunctor|direct_copy_kernel|copy_kernel|"
                                  r"CatArrayBatchedCopy|arange_cuda_out|float8_copy_kernel)|"
                                  r"^(?:void )?(?:at::cuda::(?:\(anonymous namespace\)::)?)?spin_kernel\b")


def _own_kernel_names(counter: "LaunchCounter") -> set[str]:
    own = set(counter.kernel_names)
    for m in list(counter.nvrtc._modules.values()):
        own.update(m.kernel_names)
    return own


def classify_kernels(kernels, own: set[str]) -> tuple[list[str], list[str]]:
    """(library, foreign): kernels that ran but were not compiled by the judge from the candidate's source
    (matched by their function's own identifier, never by a pattern a vendor name could share) and are not
    an allowed call's (ALLOWED_CALL_KERNELS). Vendor libraries' (cuBLAS, cuDNN, CUTLASS) are named apart."""
    library, foreign = [], []
    for k in kernels:
        low = k.lower()
        vendor = any(v in low for v in _VENDOR_NAMESPACES)
        if k in own or not vendor and _function_name(k) in own and not _TORCH_NAMESPACES.search(k):
            continue   # a Triton or extern "C" kernel by its whole name; a C++ one by its identifier, never
            # one in torch's namespaces (a candidate's no-op `elementwise_kernel` excuses none of aten's)
        if not vendor and ALLOWED_CALL_KERNELS.search(k):
            continue
        (library if vendor or any(p in low for p in LIBRARY_KERNEL_PATTERNS) else foreign).append(k)
    return library, foreign


class KernelSession:
    """GPU activity records (CUPTI, through torch.profiler) over a whole phase: every kernel that ran while
    the candidate's calls did, with its stream. Kernels on the judge's stream are the judge's; every other
    one must be the candidate's own or an allowed call's (classify_kernels). One session spans all of a
    phase's calls, checked or timed alike, so no call of the candidate's runs outside one."""

    def __init__(self, torch, side):
        self.torch, self.side = torch, side
        self.kernels: dict[str, int] = {}
        self.streams: set[int] = set()

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile
        torch = self.torch
        torch.cuda.synchronize()
        self.prof = profile(activities=[ProfilerActivity.CUDA])
        self.prof.__enter__()
        with torch.cuda.stream(self.side):   # the first kernel of the session marks the judge's stream
            torch.cuda._sleep(1)
        torch.cuda.synchronize()
        return self

    def __exit__(self, *exc):
        torch = self.torch
        torch.cuda.synchronize()
        self.prof.__exit__(*exc)
        events = []
        for ev in self.prof.profiler.kineto_results.events():
            if ev.device_type() != torch.autograd.DeviceType.CUDA:
                continue
            name = ev.name()
            if not name or "memcpy" in name.lower() or "memset" in name.lower():
                continue
            start = ev.start_ns() if hasattr(ev, "start_ns") else ev.start_us() * 1000
            events.append((start, name, int(ev.device_resource_id())))
        events.sort()
        judge = events[0][2] if events else None
        for _, name, stream in events[1:]:
            if stream == judge:
                continue
            self.kernels[name] = self.kernels.get(name, 0) + 1
            self.streams.add(stream)
        return False

    def flags(self, own: set[str], launched: bool) -> list[dict]:
        """Rejections for what ran. `launched`: the candidate's calls launched kernels of their own, so the
        records must show some; none means the records cannot be trusted, which is a rejection too."""
        out = []
        if launched and not self.kernels:
            out.append({"rule": "accounting", "detail": "the GPU's activity records show no kernel of a call that "
                        "launched kernels: the judge cannot account for what ran"})
        library, foreign = classify_kernels(self.kernels, own)
        if library:
            out.append({"rule": "forbidden_library", "detail": "library kernels ran: " + ", ".join(library[:5])})
        if foreign:
            out.append({"rule": "foreign_kernel", "detail": "kernels the judge did not compile from the "
                        "candidate's source ran: " + ", ".join(k[:200] for k in foreign[:5])})
        if len(self.streams) > 1:
            out.append({"rule": "concurrency", "detail": f"kernels ran on {len(self.streams)} streams"})
        return out


_VENDOR_NAMESPACES = ("cutlass", "cublas", "cudnn", "xmma", "cute::")
_TORCH_NAMESPACES = re.compile(r"\b(?:at|c10|cub|thrust|torch)::|\(anonymous namespace\)")


def _function_name(kernel: str) -> str:
    """A profiled kernel's own identifier: `void ns::gemm_tile<float, 64>(float const*, ...)` -> gemm_tile.
    The candidate's kernels are excused from the library-name rule by this name alone, exactly (a
    candidate kernel named `gemm` must not excuse a cuBLAS `sm90_xmma_gemm_...`)."""
    head = kernel.split("(", 1)[0]
    depth, cut = 0, len(head)
    for i, c in enumerate(head):   # drop template arguments, nested ones included
        if c == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif c == ">":
            depth -= 1
    head = head[:cut].strip()
    return head.split()[-1].split("::")[-1] if head else ""


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
        else:
            info["device"] = "cpu"
        phase("cuda_init")
        import triton  # noqa: F401  (imported before the candidate, so hooks are in place)
        phase("import_triton")
        if role == "candidate":
            counter = LaunchCounter(torch)
            snap = _integrity_snapshot(torch)
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
