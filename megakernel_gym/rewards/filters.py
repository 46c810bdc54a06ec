"""Problem filters: would a trivial kernel earn reward on this problem?

robust-kbench's finding, made checkable: a problem whose outputs are near zero, nearly
constant, or insensitive to an input or to a weight rewards a kernel that ignores that
part. Each filter here is phrased as a trivial candidate the judge's own comparison must
reject: all zeros, the output's median everywhere, the output for other inputs or other
weights, the first input passed through. Two more checks keep honest kernels from failing:
the reference must match a float64 run of itself within the problem's tolerance (the
tolerance is calibrated), and recomputing it must give the same answer (deterministic).
A mixture of experts names its expert weights in ROUTED_WEIGHTS (a regular expression over
state_dict keys): those must matter together, not one by one.

Runs inside the reference worker (problem code is untrusted); returns plain JSON.
"""
from __future__ import annotations

import copy
import re
import time
from typing import Any, Callable

from megakernel_gym.rewards.correctness import tolerances

# Thresholds, as fractions of an output's elements (see the module docstring).
MIN_NONZERO = 0.25          # an all-zero kernel must be wrong on at least this share
MAX_AT_MEDIAN = 0.75        # a constant kernel may be right on at most this share
MIN_CHANGED_ALL = 0.5       # new inputs (all of them) must change at least this share
MIN_CHANGED_ONE = 0.01      # any single input or weight must change at least this share
# The reference's own error against float64, as a share of the tolerance. An honest kernel
# accurate to its output's rounding (a bf16 half-ulp is about 20% of the bf16 tolerance) still
# passes against a reference that uses up to this much.
MAX_CALIBRATION_SHARE = 0.75
OTHER_SEED = 9_176          # the "other" inputs / weights for the sensitivity filters
OTHER_INIT_SEED = 7_919


def _tol(ref, atol, rtol, preset=None) -> tuple[float, float]:
    """The judge's (effective atol, rtol) for comparing with the reference `ref` (correctness.compare's)."""
    return tolerances(ref, atol, rtol, preset)[:2]


def close_fraction(torch, got, ref, atol, rtol, preset=None) -> float:
    """Share of elements of `got` within the judge's tolerance of `ref`."""
    if got.shape != ref.shape:
        return 0.0
    if ref.numel() == 0:
        return 1.0
    a, r = _tol(ref, atol, rtol, preset)
    g, f = got.double(), ref.double()
    ok = ((g - f).abs() <= a + r * f.abs()) | (g == f)
    return int(ok.count_nonzero()) / ok.numel()   # exact: a CUDA mean of all-true can be 1 - 1e-16


def _changed(torch, outs_a, outs_b, atol, rtol, preset=None) -> float:
    """The largest share of any one output's elements that differ beyond tolerance between two
    runs (per output: a weight that only feeds a small output, such as one layer's new cache
    row beside the logits, must still be seen there)."""
    return max((1.0 - close_fraction(torch, b, a, atol, rtol, preset) for a, b in zip(outs_a, outs_b) if a.numel()),
               default=0.0)


def _check(name: str, ok: bool | None, detail: str, **values) -> dict[str, Any]:
    """ok=None means the filter does not apply (said why in detail)."""
    return {"name": name, "ok": ok, "detail": detail, **values}


# what trivial_answer's reasons say, for whoever tells its refusals apart from other unservable problems
TRIVIAL_WORDS = ("a kernel that writes zeros", "do not depend on the inputs", "a kernel that copies",
                 "a kernel that writes NaN")


def _matches(torch, got, ref, atol, rtol, preset) -> bool:
    """As the judge's compare: integers and booleans exactly (red team 12), floats within the tolerance."""
    if got.shape != ref.shape:
        return False
    if not (ref.is_floating_point() or ref.is_complex()):
        return bool(torch.equal(got, ref))
    return close_fraction(torch, got, ref, atol, rtol, preset) == 1.0


def _which(base: list, j: int) -> str:
    return "" if len(base) == 1 else f"output {j}: "


def trivial_answer(torch, base: list, other: list | None, inputs_differ: bool, atol, rtol,
                   preset: str | None = None, inputs: list | None = None) -> str | None:
    """Why a kernel that computes nothing would be scored correct on this problem (or on one of its outputs), or
    None: an output is zeros within the judge's tolerance, or all NaN; or (where the inputs differ between the two
    draws) an output for `other` inputs matches its `base` everywhere, so one cached answer passes; or (with
    `inputs`) an output is one of the inputs it was computed from (copied_input). The judge serves no such problem
    (red team 8: KernelBench's level2/80_Gemm_Max_Subtract_GELU is GELU(x - mean(x)) over a max's single column,
    zeros for every input, and a kernel writing zeros scored correct on all six seeds; red team 17: a second
    output of zeros let a kernel skip it). Each output is its own test: a kernel that computes nothing for one
    output is rewarded for the work it skipped. The run_filters thresholds are stricter and for `mkgym problems
    check`; this is the judge's own line, exact: the trivial kernel passes the comparison outright.
    Zeros, NaN and one answer for every draw are refused on the first seed alone, whatever the other seeds'
    transforms give: a kernel can tell a transform's inputs apart (their mean, their range) and answer trivially
    for the plain draw only, or cache one answer per transform (the level-3 networks whose logits do not move with
    the input), and so skip work on the timed calls of that kind."""
    for j, o in enumerate(base):
        if o.numel() and (o.is_floating_point() or o.is_complex()) and bool(torch.isnan(o).all()):
            return (f"{_which(base, j)}every element is NaN (the judge's first seed): a kernel that writes NaN would "
                    "be scored correct, so the problem is not served")
        if o.numel() and _matches(torch, torch.zeros_like(o), o, atol, rtol, preset):
            return (f"{_which(base, j)}every element is zero within the tolerance (the judge's first seed): a kernel "
                    "that writes zeros would be scored correct, so the problem is not served (its computation "
                    "cancels out; change the problem)")
    if other is not None and inputs_differ:
        for j, (a, b) in enumerate(zip(base, other)):
            if a.numel() and _matches(torch, b, a, atol, rtol, preset):
                return (f"{_which(base, j)}the outputs do not depend on the inputs (two random draws give the same "
                        "answer within the tolerance): a kernel returning one cached answer would be scored correct, "
                        "so the problem is not served")
    return copied_input(torch, base, inputs or (), atol, rtol, preset)


def copied_input(torch, base: list, inputs, atol, rtol, preset: str | None = None, transformed=()) -> str | None:
    """Why a kernel that copies one of its inputs would be scored correct, or None: an output is input i within the
    tolerance, and (`transformed`: (outputs, inputs) for the judge's other fixed seeds' scaled and shifted inputs)
    is so at every transform too (red team 17: level1/33_BatchNorm at its initial statistics, in eval mode, is its
    input within 1e-4 at any scale or shift; ReLU of KernelBench's nonnegative torch.rand inputs is its input on the
    plain draw only, and copying there saves nothing: served)."""
    def copy_of(o, x) -> bool:
        return (isinstance(x, torch.Tensor) and bool(o.numel()) and x.dtype == o.dtype
                and _matches(torch, x.to(o.device), o, atol, rtol, preset))
    for j, o in enumerate(base):
        for i, x in enumerate(inputs):
            if copy_of(o, x) and all(i < len(xs) and copy_of(outs[j], xs[i]) for outs, xs in transformed):
                return (f"{_which(base, j)}the output is input {i} within the tolerance: a kernel that copies its "
                        "input would be scored correct, so the problem is not served (at its initial weights the "
                        "model computes the identity: a BatchNorm's running statistics, say)")
    return None


def run_filters(env, mod, specs: list[dict], atol, rtol, run: Callable, preset: str | None = None) -> dict[str, Any]:
    """All filters for one problem. `run(model, inputs)` returns the outputs as a list of
    tensors (the worker's forward under no_grad); atol/rtol are the problem's (None: the
    tolerance preset's table, else the judge's default), compared as the judge compares."""
    torch = env.torch
    checks: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    # -- it runs, and returns what the contract says ----------------------------------
    init_seed = specs[0]["init_seed"]
    model = env.model(mod.Model, mod, init_seed)
    raw = _raw_inputs(env, mod, specs[0]["seed"])
    bad = [f"position {i}: {type(x).__name__}" for i, x in enumerate(raw)
           if not isinstance(x, (torch.Tensor, int, float, bool))]
    if bad:
        raise TypeError("get_inputs() must return a list of tensors (numbers allowed); got "
                        + ", ".join(bad))
    if not any(isinstance(x, torch.Tensor) for x in raw):
        raise TypeError("get_inputs() returned no tensors; a kernel needs tensor inputs")
    base = run(model, env.inputs(mod, specs[0]))
    forward_s = time.perf_counter() - t0
    outputs = [{"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", ""),
                "mean_abs": float(o.double().abs().mean()) if o.numel() else 0.0,
                "std": float(o.double().std()) if o.numel() > 1 else 0.0} for o in base]
    if sum(o.numel() for o in base) == 0:
        raise ValueError("forward returned only empty tensors")

    # -- finite on every seed and input transform the judge will use -------------------
    per_spec = {specs[0]["label"]: base, **{s["label"]: run(model, env.inputs(mod, s)) for s in specs[1:]}}
    bad = [(label, j) for label, outs in per_spec.items() for j, o in enumerate(outs)
           if o.is_floating_point() and not bool(torch.isfinite(o).all())]
    checks.append(_check("finite", not bad, f"finite on {len(specs)} seeds/transforms" if not bad else
                         f"the reference has NaN/Inf on {bad[0][0]} (output {bad[0][1]}); restrict "
                         "INPUT_TRANSFORMS or make the op well-defined there"))

    # -- trivial outputs: zeros, a constant ---------------------------------------------
    for j, o in enumerate(base):
        tag = f"output {j}" if len(base) > 1 else "output"
        zero_ok = close_fraction(torch, torch.zeros_like(o), o, atol, rtol, preset)
        checks.append(_check("not_near_zero", 1 - zero_ok >= MIN_NONZERO,
                             f"{tag}: an all-zero kernel is right on {zero_ok:.1%} of elements "
                             f"(at most {1 - MIN_NONZERO:.0%} allowed)", value=round(1 - zero_ok, 4)))
        med = o.double().median().to(o.dtype) if o.numel() else torch.zeros((), dtype=o.dtype)
        const_ok = close_fraction(torch, torch.full_like(o, float(med)) if o.is_floating_point()
                                  else torch.full_like(o, int(med)), o, atol, rtol, preset)
        checks.append(_check("not_constant", const_ok <= MAX_AT_MEDIAN,
                             f"{tag}: a kernel writing the median {float(med):.4g} everywhere is right on "
                             f"{const_ok:.1%} of elements (at most {MAX_AT_MEDIAN:.0%} allowed)",
                             value=round(const_ok, 4)))

    # -- sensitive to the inputs: all of them, then each one ------------------------------
    spec0 = specs[0]
    other_spec = {**spec0, "seed": OTHER_SEED}
    other = env.inputs(mod, other_spec)
    mine = env.inputs(mod, spec0)
    other_out = run(model, other)
    worst = min(1 - close_fraction(torch, b, a, atol, rtol, preset) for a, b in zip(base, other_out))
    checks.append(_check("input_sensitive", worst >= MIN_CHANGED_ALL,
                         f"new inputs change {worst:.1%} of the output (at least {MIN_CHANGED_ALL:.0%} "
                         "needed, or a kernel that caches one answer passes)", value=round(worst, 4)))
    for i, (x, y) in enumerate(zip(mine, other)):
        if not isinstance(x, torch.Tensor):
            continue
        if x.shape == y.shape and torch.equal(x, y):
            checks.append(_check("uses_input", None, f"input {i} is the same for every seed (not random); "
                                 "not checked", input=i))
            continue
        swapped = list(mine)
        swapped[i] = y
        frac = _changed(torch, base, run(model, swapped), atol, rtol, preset)
        checks.append(_check("uses_input", frac >= MIN_CHANGED_ONE,
                             f"input {i} alone changes {frac:.2%} of an output's elements (at least "
                             f"{MIN_CHANGED_ONE:.0%} needed: an input that barely matters can be ignored)",
                             input=i, value=round(frac, 5)))

    # -- sensitive to the weights: each parameter/buffer alone ---------------------------
    state = model.state_dict()
    if not state:
        checks.append(_check("uses_weight", None, "the model has no parameters or buffers"))
    else:
        other_model = env.model(mod.Model, mod, OTHER_INIT_SEED)
        other_state = other_model.state_dict()
        if set(other_state) != set(state):
            raise ValueError("Model's state_dict keys depend on the seed; construct the same modules every time")
        # tied weights (one tensor under several names) are swapped together
        groups: dict[Any, list[str]] = {}
        for key, val in state.items():
            tie = (val.data_ptr(), val.shape, val.dtype) if isinstance(val, torch.Tensor) and val.numel() else key
            groups.setdefault(tie, []).append(key)
        # a mixture of experts' expert weights (the problem's ROUTED_WEIGHTS pattern) are swapped all
        # together: one at a time, an expert the router chose for no token of these inputs rightly
        # does not matter, and a kernel may skip it (that is what routing is for)
        routed_pat = getattr(mod, "ROUTED_WEIGHTS", None)
        if routed_pat is not None and not isinstance(routed_pat, str):
            raise ValueError(f"ROUTED_WEIGHTS must be a regular expression string over state_dict keys, got {routed_pat!r}")
        try:
            routed_re = re.compile(routed_pat) if routed_pat else None
        except re.error as e:
            raise ValueError(f"ROUTED_WEIGHTS {routed_pat!r} is not a regular expression: {e}") from None
        routed = [k for keys in groups.values() for k in keys if routed_re and routed_re.search(k)]
        if routed_re is not None:
            if not routed:
                raise ValueError(f"ROUTED_WEIGHTS {routed_pat!r} matches no state_dict key")
            m = copy.deepcopy(model)
            m.load_state_dict({**state, **{k: other_state[k] for k in routed}})
            frac = _changed(torch, base, run(m, env.inputs(mod, spec0)), atol, rtol, preset)
            checks.append(_check("uses_weight", frac >= MIN_CHANGED_ONE,
                                 f"the {len(routed)} routed expert weights (ROUTED_WEIGHTS) together change {frac:.2%} "
                                 f"of an output's elements (at least {MIN_CHANGED_ONE:.0%} needed); one by one they "
                                 "are not checked: an expert no token chose may be skipped", weight="ROUTED_WEIGHTS",
                                 value=round(frac, 5)))
            del m
        for keys in groups.values():
            if routed_re is not None and all(routed_re.search(k) for k in keys):
                continue
            key, val, alt = keys[0], state[keys[0]], other_state[keys[0]]
            if len(keys) > 1:
                key = " = ".join(keys)
            if not isinstance(val, torch.Tensor) or (val.shape == alt.shape and torch.equal(val, alt)):
                checks.append(_check("uses_weight", None, f"{key} does not depend on the init seed; not checked",
                                     weight=key))
                continue
            m = copy.deepcopy(model)
            m.load_state_dict({**state, **{k: alt for k in keys}})
            frac = _changed(torch, base, run(m, env.inputs(mod, spec0)), atol, rtol, preset)
            checks.append(_check("uses_weight", frac >= MIN_CHANGED_ONE,
                                 f"weight {key} alone changes {frac:.2%} of an output's elements (at least "
                                 f"{MIN_CHANGED_ONE:.0%} needed; re-draw it so that skipping it is wrong)",
                                 weight=key, value=round(frac, 5)))
            del m

    # -- a kernel that returns its first input -------------------------------------------
    first = next((x for x in mine if isinstance(x, torch.Tensor)), None)
    if first is not None and first.shape == base[0].shape and first.dtype == base[0].dtype:
        ok = close_fraction(torch, first, base[0], atol, rtol, preset)
        checks.append(_check("not_passthrough", ok < 1.0 - MIN_NONZERO,
                             f"returning the first input is right on {ok:.1%} of elements", value=round(ok, 4)))

    # -- fair to honest kernels: deterministic, tolerance wide enough --------------------
    fresh, xs = env.model(mod.Model, mod, init_seed), env.inputs(mod, spec0)
    torch.manual_seed(OTHER_SEED)   # a forward that draws random numbers is not a function of its inputs
    again = run(fresh, xs)
    agree = min(close_fraction(torch, b, a, atol, rtol, preset) for a, b in zip(base, again))
    checks.append(_check("deterministic", agree == 1.0,
                         f"a fresh model on the same weights and inputs reproduces {agree:.2%} of the output"
                         + ("" if agree == 1.0 else " (random numbers or uninitialized memory in forward?)")))
    checks.append(_calibration(env, mod, model, specs, per_spec, atol, rtol, run, preset))
    return {"checks": checks, "outputs": outputs, "forward_s": round(forward_s, 4),
            "elapsed_s": round(time.perf_counter() - t0, 4)}


def _raw_inputs(env, mod, seed: int) -> list:
    torch = env.torch
    torch.manual_seed(seed)
    with torch.device(env.device):
        got = mod.get_inputs()
    if not isinstance(got, (list, tuple)):
        raise TypeError(f"get_inputs() returned {type(got).__name__}; return a list of tensors")
    return list(got)


def _calibration(env, mod, model, specs, per_spec, atol, rtol, run, preset=None) -> dict[str, Any]:
    """The reference in its own dtype against a float64 run of the same weights and inputs, on
    every seed and input transform the judge uses. An honest kernel rounds differently from the
    reference, by up to about as much again, so the reference's own error must stay within
    MAX_CALIBRATION_SHARE of the tolerance."""
    torch = env.torch
    worst_err, where = 0.0, ""
    try:
        m64 = copy.deepcopy(model).double()
    except Exception as e:  # noqa: BLE001
        return _check("tolerance_calibrated", None, f"no float64 copy of the model ({type(e).__name__}); "
                      "tolerance not calibrated")
    for spec in specs:
        base = per_spec[spec["label"]]
        try:
            xs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in env.inputs(mod, spec)]
            wide = run(m64, xs)
        except Exception as e:  # noqa: BLE001 - many ops (fp8, some custom ones) have no float64 path
            return _check("tolerance_calibrated", None, f"no float64 run possible ({type(e).__name__}: "
                          f"{str(e)[:120]}); tolerance not calibrated")
        if len(wide) != len(base):
            return _check("tolerance_calibrated", None, "the float64 run returned a different number of outputs")
        for o, w in zip(base, wide):
            if not o.is_floating_point() or not w.is_floating_point():
                continue
            a, r = _tol(o, atol, rtol, preset)
            w = w.to(o.device).double()
            fin = torch.isfinite(w)
            share = ((o.double() - w).abs() / (a + r * w.abs())).where(fin, torch.zeros((), dtype=w.dtype))
            err = float(share.max()) if share.numel() else 0.0
            if err > worst_err:
                worst_err, where = err, spec["label"]
    ok = worst_err <= MAX_CALIBRATION_SHARE
    return _check("tolerance_calibrated", ok,
                  f"the reference's own rounding uses {worst_err:.0%} of the tolerance against float64"
                  + (f" (worst on {where})" if where else "")
                  + ("" if ok else f"; above {MAX_CALIBRATION_SHARE:.0%} an honest kernel that rounds differently "
                     "fails: widen ATOL/RTOL or drop the input transform that causes it"),
                  value=round(worst_err, 4))
