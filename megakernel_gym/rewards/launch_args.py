"""What a Triton launch from a candidate's code may take (sandbox.LaunchCounter checks each launch here, before
Triton sees it): tensors and plain values as arguments, what a GPU compile can specialize on as tl.constexpr
arguments, plain launch options, a grid callable called with the launch's arguments as a GPU launch calls it, and
Triton's host tensor descriptors over a tensor's own storage. Taken out of sandbox.py; LaunchCounter's
counter.refuse, where set, makes each refusal the guard's.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megakernel_gym.rewards.sandbox import LaunchCounter


_CONSTEXPR_TYPES = (int, float, bool, str, type(None))


def _check_launch_args(kernel, a, kw, counter: "LaunchCounter") -> None:
    """A launch's arguments are tensors and plain values, and its tl.constexpr arguments what a GPU compile
    can specialize on: numbers, strings, None, triton dtypes and constexprs, and @triton.jit functions.
    Under the CPU interpreter anything else (a torch tensor as a constexpr, a Python closure, an object of
    the candidate's whose `data_ptr` property Triton's argument copy would run) would run the candidate's
    Python where the judge's watchers look away."""
    import torch
    # a keyword named like a launch option is the kernel's argument where the kernel has a parameter of that name
    # (red team 13: `def _k(x_ptr, n, stream, BLOCK)` with stream= an object whose data_ptr property computed
    # softmax in Triton's argument copy, where the watchers look away); a launch option is a plain value
    fn = _kernel_fn(kernel)
    params = set(inspect.signature(fn).parameters) if fn is not None else set()
    options = {k: v for k, v in kw.items() if k in _LAUNCH_OPTIONS and k not in params}
    for k, v in options.items():
        plain = isinstance(v, (int, float, bool, str, type(None), torch.device)) or k == "grid" and (
            callable(v) or isinstance(v, (tuple, list)) and all(isinstance(g, int) for g in v))
        if not plain:
            what = f"the launch option {k}= of type {type(v).__name__}"
            hint = "launch options are numbers, strings or None (grid: a tuple of ints or a function of the meta)"
            if counter.refuse is not None:
                raise counter.refuse(what, hint)
            raise TypeError(f"{what}: {hint}")
    for v in list(a) + [v for k, v in kw.items() if k not in options]:
        why = _descriptor_problem(torch, v)
        if why:
            what = f"a tensor descriptor passed to the kernel {getattr(kernel, '__name__', '')}: {why}"
            hint = "make it with TensorDescriptor.from_tensor(t, block_shape) on a tensor, or with plain ints " \
                   "that address the tensor's own storage"
            if counter.refuse is not None:
                raise counter.refuse(what, hint)
            raise TypeError(f"{what}: {hint}")
        if why is None and not (type(v) in (torch.Tensor, torch.nn.Parameter) or _constexpr_value(v)):
            what = f"an argument of type {type(v).__name__} to the kernel {getattr(kernel, '__name__', '')}"
            hint = "kernel arguments are torch tensors, numbers, strings, None, triton dtypes or @triton.jit functions"
            if counter.refuse is not None:
                raise counter.refuse(what, hint)
            raise TypeError(f"{what}: {hint}")
    _check_constexprs(kernel, a, kw, counter)


def _descriptor_problem(torch, v) -> str | None:
    """For Triton's host tensor descriptor (triton.tools.tensor_descriptor): '' where it is a torch tensor's, in
    plain ints and strings, addressing only that tensor's storage, else what is wrong (its fields are the
    candidate's to set: an object whose data_ptr or __index__ ran Python in Triton's argument copy, or a shape past
    the storage, would reach where a tensor argument cannot); None for any other value."""
    from megakernel_gym.rewards.guard import _tensor_descriptor_type
    cls = _tensor_descriptor_type()
    if cls is None or type(v) is not cls:
        return None
    base = v.base
    if type(base) not in (torch.Tensor, torch.nn.Parameter):
        return f"its base is a {type(base).__name__}, not a tensor"
    dims = (v.shape, v.strides, v.block_shape)
    if not all(type(d) in (list, tuple, torch.Size) and all(type(x) is int for x in d) for d in dims) \
            or type(v.padding) is not str or type(getattr(v, "round_f32_to_tf32", False)) is not bool:
        return "its shape, strides and block shape are not lists of ints"
    if len(v.shape) != len(v.strides) or len(v.block_shape) != len(v.shape) or not v.shape \
            or any(n <= 0 for n in v.shape) or any(st < 0 for st in v.strides) or v.strides[-1] != 1 \
            or v.padding not in ("zero", "nan"):
        # (TensorDescriptor's own __post_init__ asserts these, but its lists are the candidate's, and may change
        # after it: red team 31 set the last stride to 0, which the reach below took at its word and a TMA load
        # reads as contiguous, 2**20 elements past a 16-element scratch tensor)
        return (f"its shape {list(v.shape)}, strides {list(v.strides)} and block shape {list(v.block_shape)} do "
                "not describe a tensor whose last dimension is contiguous")
    last = base.storage_offset() + sum((n - 1) * st for n, st in zip(v.shape, v.strides))
    if (last + 1) * base.element_size() > base.untyped_storage().nbytes():
        return f"its shape {list(v.shape)} and strides {list(v.strides)} reach past its base's storage"
    return ""


# a launch's own keywords, not the kernel's arguments (Triton's run(..., grid=, warmup=, num_warps=...))
_LAUNCH_OPTIONS = {"grid", "warmup", "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                   "launch_cooperative_grid", "launch_pdl", "stream", "device", "device_type"}


def _grid_now(kernel, grid, a, kw) -> tuple:
    """A launch's grid callable called here, with the launch's arguments by name, as Triton's GPU launch calls it
    (JITFunction.run's bound arguments): Triton's CPU interpreter calls it later, after it has put its numpy
    stand-ins in triton.language's place and turned the tensors into host pointers, so a grid function's
    tl.load/tl.exp/tl.store computed a softmax as plain Python there while the kernel launched did nothing (red
    team 18). Here tl's functions are Triton's own, which run only inside a kernel."""
    fn = _kernel_fn(kernel)
    meta: dict = {}
    if fn is not None:
        sig = inspect.signature(fn)
        bound = sig.bind_partial(*a, **{k: v for k, v in kw.items() if k in sig.parameters})
        bound.apply_defaults()
        meta = dict(bound.arguments)
    got = grid(meta)
    return tuple(got) if isinstance(got, (tuple, list)) else (got,)


def _kernel_fn(kernel):
    """A launched kernel's Python function (through autotune/heuristics wrappers), or None."""
    fn = getattr(kernel, "fn", None)
    while fn is not None and not inspect.isfunction(fn):
        fn = getattr(fn, "fn", None)
    return fn


def _check_constexprs(kernel, a, kw, counter: "LaunchCounter") -> None:
    """A launch's tl.constexpr arguments are what a GPU compile can specialize on (see _check_launch_args)."""
    fn = _kernel_fn(kernel)
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
