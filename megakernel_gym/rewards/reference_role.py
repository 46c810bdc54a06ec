"""The reference worker's commands (rewards/sandbox.py's `reference` role): the problem's facts before
anything runs (meta: tolerances, transforms, footprint), its outputs on the seeds, the compare and the
re-check of a candidate's outputs against them, and the timing of the baselines (eager, CUDA graph,
torch.compile, and the production kernels a problem names). None of this runs in the candidate's process.
"""
from __future__ import annotations

import json
from typing import Any

from megakernel_gym.rewards.problem import BASELINES, tolerance_ok
from megakernel_gym.rewards.worker_env import Env, _tb, as_outputs, tensor_bytes


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
        for k in ("atol", "rtol"):    # (computed ones: literal ones are checked as the file loads, _check_meta)
            if meta[k] is not None and not tolerance_ok(meta[k]):
                raise ValueError(f"{k.upper()} must be a finite number >= 0, got {meta[k]!r}")
        # sized on the meta device: the cpu backend's host limit, and a GPU's admission (rewards/admission.py)
        fp = meta["footprint"] = footprint(env.torch, mod) if msg.get("footprint", True) else None
        over = _over_host(fp) if fp is not None and env.backend == "cpu" else ""
        if over:
            return {"ok": False, "error": "too_large", "message": over}
        if msg.get("spec"):
            # run the reference once: a problem that cannot produce outputs fails here, as a
            # problem error, before any candidate is blamed for it; nor is one served whose answer a
            # kernel computing nothing would match (filters.trivial_answer)
            sha = env.problem_sha(msg["problem_source"])
            base = _reference_outputs(env, mod, sha, msg["spec"])
            why = _trivial(env, mod, sha, msg["spec"], base, meta, msg.get("tolerance"))
            if why:
                return {"ok": False, "error": "trivial", "message": why}
        return {"ok": True, "meta": meta}
    except BaseException:  # noqa: BLE001 - the problem file is untrusted input
        return {"ok": False, "error": "problem_load", "message": _tb()}


def _trivial(env: Env, mod, sha: str, spec: dict, base: list, meta: dict, preset) -> str | None:
    """filters.trivial_answer on the reference's outputs for `spec` and for another draw of its inputs."""
    from megakernel_gym.rewards.filters import OTHER_SEED, copied_input, trivial_answer
    torch = env.torch
    other_spec = {**spec, "seed": OTHER_SEED, "cache": False}
    mine, theirs = env.inputs(mod, spec), env.inputs(mod, other_spec)
    differ = any(isinstance(a, torch.Tensor) and not (a.shape == b.shape and torch.equal(a, b))
                 for a, b in zip(mine, theirs))
    del theirs     # (a KernelBench problem's inputs can be gigabytes: not held beside the run)
    other = _reference_outputs(env, mod, sha, other_spec) if differ else None
    why = trivial_answer(torch, base, other, differ, meta["atol"], meta["rtol"], preset)
    copied = None if why else copied_input(torch, base, mine, meta["atol"], meta["rtol"], preset)
    if not copied:
        return why
    # a copy on the first seed is a trivial answer only if it is one at every fixed seed's transform too: those
    # outputs are run now, one transform at a time, where the first seed found one (a few problems)
    from megakernel_gym.rewards.correctness import _allowed_transforms
    for t in dict.fromkeys(_allowed_transforms(meta.get("input_transforms", ()))):
        if t[0] != "plain":
            tspec = {**spec, "transform": list(t), "cache": False}
            pair = (_reference_outputs(env, mod, sha, tspec), env.inputs(mod, tspec))
            if not copied_input(torch, base, mine, meta["atol"], meta["rtol"], preset, transformed=[pair]):
                return None      # a copy fails this seed: served
            del pair
    return copied
    # a copy on the first seed is a trivial answer only if it passes every fixed seed's transform too: those outputs
    # are run now, one transform at a time, where the first seed found one (a few problems: no cost to the rest)
    from megakernel_gym.rewards.correctness import _allowed_transforms
    for t in dict.fromkeys(_allowed_transforms(meta.get("input_transforms", ()))):
        if t[0] != "plain":
            tspec = {**spec, "transform": list(t), "cache": False}
            pair = (_reference_outputs(env, mod, sha, tspec), env.inputs(mod, tspec))
            if trivial_answer(torch, base, other, differ, meta["atol"], meta["rtol"], preset, inputs=mine,
                              transformed=[pair]) != why:
                return None      # the same trivial kernel fails this seed: served
            del pair
    return why


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


# What a production baseline's failure to import adds: what the extra installs (issue 43); a library outside it
# (mamba-ssm, FlashInfer: built against a CUDA toolkit) is the problem file's to name.
PRODUCTION_EXTRA = "not installed here; pip install -e '.[baselines]' adds Liger-Kernel, flash-linear-attention, torchao"


def _not_installed(e: ImportError) -> str:
    return f"{type(e).__name__}: {e} ({PRODUCTION_EXTRA})"[:500]


def production_baselines(env: Env, mod, sha: str, specs: list, atol=None, rtol=None,
                         preset: str | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
    """The problem's production kernels (its PRODUCTION: name -> why; its production_baselines(model): name ->
    a callable of get_inputs()'s tensors, built on the problem's Model with the reference's weights), each
    checked against the reference on the fixed seeds before it may count. Returns (name -> callable, for the
    ones that passed; name -> report: {"kind", "why"} and "checked_seeds" where it passed, "error" where it
    failed or computed something else, "skipped" where its library is not installed, never silently)."""
    from megakernel_gym.rewards.correctness import compare
    torch = env.torch
    names = getattr(mod, "PRODUCTION", None)
    if not names:
        return {}, {}
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        return {}, {"production": {"kind": "production", "error": "PRODUCTION must be a dict of name -> why (str)"}}
    report = {n: {"kind": "production", "why": why} for n, why in names.items()}
    build = getattr(mod, "production_baselines", None)
    specs = [sp for sp in specs if sp["init_seed"] == specs[0]["init_seed"]]
    try:
        if not callable(build):
            raise TypeError("the problem names PRODUCTION but defines no production_baselines(model)")
        # the reference's model and weights (Env.model seeds them), the one _reference_outputs keeps where it does
        model = env.models.get((sha, specs[0]["init_seed"]))
        if model is None:           # (not `or`: a container module of no children is falsy)
            model = env.model(mod.Model, mod, specs[0]["init_seed"])
        built = build(model)
        if not isinstance(built, dict):
            raise TypeError(f"production_baselines(model) returned {type(built).__name__}, not a dict")
    except ImportError as e:
        for r in report.values():
            r["skipped"] = _not_installed(e)
        return {}, report
    except Exception as e:  # noqa: BLE001 - the problem's own code
        for r in report.values():
            r["error"] = f"{type(e).__name__}: {e}"[:500]
        return {}, report
    ok: dict[str, Any] = {}
    for name, r in report.items():
        fn = built.get(name)
        if not callable(fn):
            r["error"] = "production_baselines(model) gave no callable for it"
            continue
        try:
            worst = 0.0
            for sp in specs:
                refs = _reference_outputs(env, mod, sha, sp)
                base = env.inputs(mod, sp)
                xs = env.perturbed(base, sp["scale"]) if sp.get("scale") is not None else base
                with torch.no_grad():
                    outs = [t.detach() for t in as_outputs(torch, fn(*xs))]
                res = compare(outs, refs, atol, rtol, preset)
                if not res["ok"]:
                    raise _Incorrect(f"incorrect on seed {sp['seed']} ({sp['transform'][0]}): {res.get('why')}")
                worst = max(worst, float(res.get("tol_used") or 0.0))
            r["checked_seeds"], r["tol_used"] = len(specs), round(worst, 4)
            ok[name] = fn
        except ImportError as e:
            r["skipped"] = _not_installed(e)
        except _Incorrect as e:
            r["error"] = str(e)[:500]
        except Exception as e:  # noqa: BLE001 - a kernel that does not run here (a device it lacks, a shape)
            r["error"] = f"{type(e).__name__}: {e}"[:500]
    return ok, report


class _Incorrect(Exception):
    pass


def handle_baselines(env: Env, msg: dict, workdir: str) -> dict:
    """Time eager PyTorch, CUDA-graph replay of eager, torch.compile and the problem's production kernels
    (production_baselines: each checked against the reference first) on the problem.

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
    # in the order they are shown (problem.BASELINES), though the CUDA graph is timed last (see below)
    results: dict[str, Any] = dict.fromkeys(BASELINES)
    restart = None
    with torch.no_grad():
        results["eager"] = time_gpu(torch, lambda xs: model(*xs), prepare, **msg["timing"])
        try:
            if isinstance(compiled, Exception):
                raise compiled
            results["torch_compile"] = time_gpu(torch, lambda xs: compiled(*xs), prepare, **msg["timing"])
        except Exception as e:  # noqa: BLE001
            results["torch_compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        # production kernels (issue 43): checked on the fixed seeds first, then timed as eager is
        ready, report = production_baselines(env, mod, env.problem_sha(msg["problem_source"]), specs,
                                             msg.get("atol"), msg.get("rtol"), msg.get("tolerance"))
        for name, r in report.items():
            if name in ready:
                try:
                    r.update(time_gpu(torch, lambda xs, fn=ready[name]: fn(*xs), prepare, **msg["timing"]))
                except Exception as e:  # noqa: BLE001
                    r["error"] = f"{type(e).__name__} while timed: {e}"[:500]
            results[f"production:{name}"] = r
        ready = None
        # CUDA graph of eager: static input buffers, refilled outside the timed region; last (see below)
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
            # a failed capture leaves the CUDA generator's capture bookkeeping behind: every later random
            # draw in this process raises "Offset increment outside graph capture" (seen with a MoE's
            # data-dependent routing), so the graph goes last and the judge replaces this worker after it
            restart = f"the CUDA-graph capture failed ({type(e).__name__}); the worker's RNG state is not trusted"
        static = graph = None
    for r in results.values():
        r.pop("kept", None)
    memory = {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved()}
    torch.cuda.reset_peak_memory_stats()   # (after_command gives the cache back)
    props = torch.cuda.get_device_properties(0)
    return {"ok": True, "baselines": results, "device": props.name, "memory": memory,
            **({"restart": restart} if restart else {})}
