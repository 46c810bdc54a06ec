"""The cpu backend's walls around Triton's CPU interpreter (TRITON_INTERPRET=1), which runs a kernel's body as
Python over numpy and its loads and stores as raw host addresses: the body the interpreter runs is the one the
jit-body rules read (interpret_own_source), the launch's argument copies are the judge's own data movement
(mark_argument_moves), autotune runs its first config (autotune_without_benchmarks), and every load, store and
atomic stays within the launch's tensor arguments (bound_memory). Taken out of sandbox.py.

bound_memory: there a kernel's pointers are host addresses of the worker process and its loads and stores are raw
reads and writes of them (triton's `_interpreter.load/store/atomic_*`). Red team 23's kernel took
`id(math.e)` and a tensor's `data_ptr()`, stored 3.0 at the float's payload, scored correct, and left every
later candidate in the kept worker computing with that e: an honest softmax after it was incorrect (a
GRPO sibling's reward lowered), and the guard's own state was within the same reach. On a GPU a kernel's
addresses are the device's; here each unmasked lane of a load, store or atomic must lie within the storage
of one of the launch's tensor arguments, checked before the access: anything else is the guard's refusal
(a rejection, whether or not the candidate catches it). Masked-off lanes are not read, as on a GPU, so an
honest tail mask that computes addresses past the end passes.
"""
from __future__ import annotations

import ast
import os
import types
import weakref
from typing import Any, Callable

import numpy as np

from megakernel_gym.rewards.triton_frontend import SameBranches


class Bounds:
    """The storage spans [lo, hi) of the running launch's tensor arguments, merged and sorted."""

    def __init__(self):
        self.active = 0                    # launches whose body is running (GridExecutor.__call__)
        self.before_body: list[Callable] = []   # (executor, args, kwargs) -> None, or raise: before each launch
        self.clear()

    def clear(self) -> None:
        self.lo = np.zeros(0, dtype=np.uint64)
        self.hi = np.zeros(0, dtype=np.uint64)

    def set_from(self, values) -> None:
        spans = []

        def walk(v):
            if isinstance(v, (tuple, list)):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)
            elif hasattr(v, "untyped_storage"):
                s = v.untyped_storage()
                if s.nbytes():
                    spans.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
            elif hasattr(v, "base") and not isinstance(v, (int, float, str)):   # a TensorWrapper, a TensorDescriptor
                walk(v.base)
        walk(values)
        spans.sort()
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.lo = np.array([m[0] for m in merged], dtype=np.uint64)
        self.hi = np.array([m[1] for m in merged], dtype=np.uint64)

    def outside(self, ptrs, mask, itemsize: int) -> int:
        """How many active lanes address bytes outside every span."""
        addr = np.asarray(ptrs, dtype=np.uint64)
        if mask is not None:
            addr = addr[np.broadcast_to(np.asarray(mask, dtype=bool), addr.shape)]
        addr = addr.reshape(-1)
        if not addr.size:
            return 0
        if not self.lo.size:
            return int(addr.size)
        i = np.searchsorted(self.lo, addr, side="right").astype(np.int64) - 1
        inside = (i >= 0) & (addr + np.uint64(itemsize) <= self.hi[np.maximum(i, 0)])
        return int(addr.size - np.count_nonzero(inside))


class _Bounded:
    """triton.runtime.interpreter's `_interpreter` (its C++ memory functions), each access checked first."""

    def __init__(self, real, bounds: Bounds, refuse: Callable[[str, str], BaseException]):
        self._real, self._bounds, self._refuse = real, bounds, refuse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _check(self, what: str, ptrs, mask, itemsize: int) -> None:
        if not self._bounds.active:        # no launch's body is running: no memory is a kernel's (red team 24)
            raise self._refuse(f"a Triton {what} outside a kernel launch", "tl's memory operations run inside a "
                               "@triton.jit function launched with kernel[grid](...)")
        n = self._bounds.outside(ptrs, mask, itemsize)
        if n:
            raise self._refuse(f"a Triton kernel's {what} of {n} element(s) outside the memory of its launch's "
                               "tensor arguments", "a kernel reads and writes the tensors it is passed, within "
                               "their storage (mask the lanes past the end)")

    def load(self, ptrs, mask, other, dtype):
        self._check("load", ptrs, mask, np.dtype(dtype).itemsize)
        return self._real.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        self._check("store", ptrs, mask, np.asarray(value).dtype.itemsize)
        return self._real.store(ptrs, value, mask)

    def atomic_cas(self, ptr, cmp, val, sem):
        self._check("atomic", ptr, None, np.asarray(val).dtype.itemsize)
        return self._real.atomic_cas(ptr, cmp, val, sem)

    def atomic_rmw(self, op, ptr, val, mask, sem):
        self._check("atomic", ptr, mask, np.asarray(val).dtype.itemsize)
        return self._real.atomic_rmw(op, ptr, val, mask, sem)


def _descriptor_reduce(interpreter) -> None:
    """desc.atomic_add/min/max/and/or/xor (a TMA reduce on Hopper) under the interpreter, which has none (Triton
    3.9: an honest atomic_add through a descriptor failed with an AttributeError, red team 31): the descriptor's
    lanes as pointers and a mask, as its store takes them, through the interpreter's atomic_rmw, which the launch's
    memory bounds check (_Bounded.atomic_rmw)."""
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or hasattr(builder, "create_descriptor_reduce"):
        return
    from triton._C.libtriton import ir

    def create_descriptor_reduce(self, kind, desc, value, indices):
        ptrs, mask = desc.materialize_pointers(indices)
        dtype = ptrs.get_element_ty()
        floating, signed = dtype.is_floating(), not getattr(dtype, "is_int_unsigned", lambda: False)()
        ops = {ir.DESCRIPTOR_REDUCE_KIND.ADD: ir.ATOMIC_OP.FADD if floating else ir.ATOMIC_OP.ADD,
               ir.DESCRIPTOR_REDUCE_KIND.MIN: ir.ATOMIC_OP.MIN if signed else ir.ATOMIC_OP.UMIN,
               ir.DESCRIPTOR_REDUCE_KIND.MAX: ir.ATOMIC_OP.MAX if signed else ir.ATOMIC_OP.UMAX,
               ir.DESCRIPTOR_REDUCE_KIND.AND: ir.ATOMIC_OP.AND, ir.DESCRIPTOR_REDUCE_KIND.OR: ir.ATOMIC_OP.OR,
               ir.DESCRIPTOR_REDUCE_KIND.XOR: ir.ATOMIC_OP.XOR}
        if kind not in ops:
            raise NotImplementedError(f"the descriptor reduce {kind} under the interpreter")
        return self.create_atomic_rmw(ops[kind], ptrs, value, mask, ir.MEM_SEMANTIC.RELAXED, ir.MEM_SYNC_SCOPE.GPU)
    builder.create_descriptor_reduce = create_descriptor_reduce


def _language_now() -> list:
    """triton.language as it is, where the interpreter patches it: a @triton.jit function called inside a launch
    patches it with the interpreter's functions (InterpretedFunction.__call__) and never restores it, so every later
    launch in the worker, and Triton's front end (compile_before_running), saw the interpreter's language."""
    import triton.language as tl
    objs = [tl, tl.core, tl.core.tensor, getattr(tl, "math", None), getattr(tl.core, "tensor_descriptor_base", None)]
    return [(o, dict(vars(o))) for o in objs if o is not None]


def _restore_language(saved: list) -> None:
    for obj, before in saved:
        now = vars(obj)
        for name in [n for n in now if n not in before]:
            delattr(obj, name)
        for name, value in before.items():
            if now.get(name, _ABSENT) is not value:
                setattr(obj, name, value)


_ABSENT = object()


def refusal(what: str, hint: str) -> BaseException:
    """The refusal where the guard is off (tests of the layers below it)."""
    return RuntimeError(f"{what}: {hint}" if hint else what)


def _rewrap(owner, name: str, make: Callable) -> None:
    """owner.name replaced by make(Triton's own), which is kept on the wrapper: installed again, it wraps Triton's
    own again rather than its own wrapper."""
    orig = getattr(owner, name)
    orig = getattr(orig, "_unbounded", orig)
    new = make(orig)
    new._unbounded = orig
    setattr(owner, name, new)


def bound_memory(interpreter, refuse: Callable[[str, str], BaseException] | None = None) -> Bounds:
    """Bound `interpreter`'s (triton.runtime.interpreter's) memory accesses to each launch's tensor arguments:
    the spans are taken as GridExecutor copies a launch's arguments to the host, before its body runs."""
    bounds = Bounds()
    real = interpreter._interpreter
    if isinstance(real, _Bounded):
        real = real._real
    interpreter._interpreter = _Bounded(real, bounds, refuse or refusal)
    ge = interpreter.GridExecutor

    def spans_of(init):
        def _init_args_hst(self, *a, **kw):
            out = init(self, *a, **kw)
            bounds.set_from(out)
            return out
        return _init_args_hst
    _rewrap(ge, "_init_args_hst", spans_of)

    # a launch's body runs inside GridExecutor.__call__: its spans hold while it does, and none after (red team 24:
    # the last launch's spans held for a later direct call, over memory freed since and reused by Python objects)
    def while_running(call):
        def __call__(self, *a, **kw):
            for check in bounds.before_body:
                check(self, a, kw)
            lang = _language_now() if not bounds.active else None
            bounds.active += 1
            try:
                return call(self, *a, **kw)
            finally:
                bounds.active -= 1
                if not bounds.active:
                    bounds.clear()
                if lang is not None:
                    _restore_language(lang)
        return __call__
    _rewrap(ge, "__call__", while_running)
    _descriptor_reduce(interpreter)

    # a @triton.jit function called as a function runs only inside a launch's body, as on a GPU (red team 24: a
    # direct call from host code ran uncounted, outside any launch's spans, and left triton.language patched with
    # the interpreter's functions for the rest of the worker's life)
    def inside_a_launch(direct):
        def device_call(self, *a, **kw):
            if not bounds.active:
                name = getattr(getattr(self, "fn", None), "__name__", "?")
                raise (refuse or refusal)(f"a call of the @triton.jit function {name} outside a kernel",
                                          "launch it with kernel[grid](...); call it as a function only inside "
                                          "another @triton.jit function")
            return direct(self, *a, **kw)
        return device_call
    if getattr(interpreter, "InterpretedFunction", None) is not None:
        _rewrap(interpreter.InterpretedFunction, "__call__", inside_a_launch)
    return bounds


def interpret_own_source(interpreter, refuse: Callable[[str, str], BaseException]) -> None:
    """Triton's CPU interpreter re-reads a @triton.jit function's source from its file and executes it:
    from the last line of the function's text that starts with `def ` (a line inside a string constant
    would do), with the function's module globals, into which it first copies its own. Here it takes the
    function's own definition from the file's syntax tree (the text the guard's jit-body rules checked),
    and executes it in a copy of the globals, so that nothing of the interpreter's lands in the candidate's
    namespace."""
    rewriter = getattr(interpreter, "FunctionRewriter", None)
    if rewriter is None or not hasattr(rewriter, "ast_transformer"):
        # a Triton whose interpreter the judge does not know: its kernels would run a body no rule read, so
        # none runs (red team 24: this returned, and the wall was silently off)
        fn_cls = getattr(interpreter, "InterpretedFunction", None)
        if fn_cls is not None:
            def unknown(self, *a, **kw):
                raise RuntimeError("this Triton's CPU interpreter has no FunctionRewriter.ast_transformer, which the "
                                   "judge needs to run the kernel body its rules read: install a Triton 3.x the "
                                   "judge knows (pip install -e . picks one)")
            fn_cls.run = unknown
        return
    import ast as _ast

    from megakernel_gym.rewards.jit_rules import jit_functions, launch_globals_problem

    def rewrite_ast(self):
        fn = self.fn
        code = fn.__code__
        theirs = triton_own(code.co_filename)
        node, module = own_definition(fn, with_module=True)
        # only a def the jit-body rules read (decorated @triton.jit in the file; Triton's own library aside): one made a kernel
        # any other way (triton.jit(f), an alias of the decorator) would run unread (anticheat's kernel_form
        # refuses those statically; this is the wall behind it)
        if not theirs and not any(n is node for n in jit_functions(module)):
            raise RuntimeError(f"{fn.__name__} is launched as a Triton kernel but is not decorated @triton.jit in "
                               f"the candidate's file: write the decorator directly above its def")
        if not theirs:
            # the module's names as they are now, against what the rules read from the file (red team 23: a
            # constant rebound to a Python helper, a module-level `def min`)
            why = launch_globals_problem(node, fn.__globals__)
            if why:
                raise refuse(why, "")
        node.decorator_list = []
        tree = _ast.Module(body=[node], type_ignores=[])
        if not theirs and _PATH_CHECKS:   # on the places of the file's own nodes, before the interpreter's rewrite
            tree = SameBranches(code.co_filename).visit(tree)
        tree = self.ast_transformer.visit(tree)
        if not theirs:
            tree = _HostReads(fn.__globals__).visit(tree)
        _ast.fix_missing_locations(tree)
        compiled = compile(tree, filename=code.co_filename, mode="exec")
        namespace = dict(fn.__globals__)
        for key, value in vars(interpreter).items():
            namespace.setdefault(key, value)
        namespace[_HostReads.CALL], namespace[_HostReads.INDEX] = host_read, host_index
        if not theirs:
            for name, value in builtins_as_triton.items():
                if name not in fn.__globals__:
                    namespace[name] = value
            for name, value in (("int", int), ("float", float)):
                # Python's, not the guard's wrappers (red team 29: `isinstance(BLOCK, int)` in tl.static_assert
                # failed on the wrapper); a call of either on a kernel value is refused (_HostReads)
                if name not in fn.__globals__:
                    namespace[name] = value
            namespace.update(_PATH_CHECKS)
        local = {**self.kwargs}
        exec(compiled, namespace, local)
        REWRITTEN_FROM[local[fn.__name__]] = fn
        return local[fn.__name__]
    rewriter.rewrite_ast = rewrite_ast
    from megakernel_gym.rewards.triton_frontend import interpreter_builtins
    builtins_as_triton = interpreter_builtins(interpreter)

    import triton.language.core as core
    why = ("it reads the value on the host (under the CPU interpreter a scalar's __index__ gives Python its "
           "value), where a GPU compile takes Python's int, float, math and indexing on constexprs only (red team "
           "25: a softmax computed with math.exp on Python floats). Use triton.language's functions (tl.exp, "
           "x.to(tl.int32), tl.where)")

    def host_read(f, *args, **kw):
        if any(isinstance(a, core.tensor) for a in (*args, *kw.values())):
            raise refuse(f"{getattr(f, '__name__', 'a call')}() of a kernel value in a @triton.jit body", why)
        return f(*args, **kw)

    def host_index(i):
        if isinstance(i, core.tensor) or isinstance(i, tuple) and any(isinstance(x, core.tensor) for x in i):
            raise refuse("indexing by a kernel value in a @triton.jit body", why)
        return i

    # the combine function of tl.reduce / tl.associative_scan: the interpreter called its raw function (never
    # rewritten, so neither the launch check nor the host reads' wall held there); now its rewritten body
    def rewritten_combine(init):
        def ops_init(self, axis, combine_fn, *a, **kw):
            init(self, axis, combine_fn, *a, **kw)
            fn = getattr(combine_fn, "fn", None)
            if isinstance(combine_fn, interpreter.InterpretedFunction) and fn is not None and \
                    not triton_own(fn.__code__.co_filename):
                self.combine_fn = types.SimpleNamespace(fn=combine_fn.rewrite())
        return ops_init
    if getattr(interpreter, "ReduceScanOpInterface", None) is not None:
        _rewrap(interpreter.ReduceScanOpInterface, "__init__", rewritten_combine)


# the names a rewritten body calls to check its conditions and blocks against Triton's front end (set by
# compile_before_running; empty where the front end is not run: the gpu backend)
_PATH_CHECKS: dict[str, Callable] = {}
# the function the interpreter runs (its rewritten body) -> the @triton.jit function it was made from
REWRITTEN_FROM: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def triton_own(filename: str) -> bool:
    """Whether a function's file is Triton's own library (tl.zeros, tl.max...), which the rules do not read."""
    import triton
    return os.path.realpath(filename).startswith(os.path.dirname(os.path.realpath(triton.__file__)) + os.sep)


def own_definition(fn, with_module: bool = False):
    """`fn`'s def in its file's syntax tree, read as UTF-8: the text the guard's jit-body rules read (linecache
    decodes by a `# coding:` line, which turned a checked comment into code; anticheat.encoding_flags refuses the
    line, this reads past it). The interpreter runs this def and Triton's front end compiles it."""
    code = fn.__code__
    with open(code.co_filename, encoding="utf-8") as f:
        text = f.read()
    module = ast.parse(text)
    defs = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__
            and (min([d.lineno for d in n.decorator_list] + [n.lineno]) <= code.co_firstlineno <= n.lineno)]
    if len(defs) != 1:
        raise RuntimeError(f"the @triton.jit function {fn.__name__} has no definition of its own in "
                           f"{code.co_filename}")
    return (defs[0], module) if with_module else defs[0]


def compile_before_running(interpreter, bounds: "Bounds", refuse: Callable[[str, str], BaseException] | None = None
                           ) -> None:
    """Each launch's kernel goes through Triton's GPU front end before the interpreter runs its body
    (triton_frontend): a kernel that a GPU compile refuses does not run here either."""

    from megakernel_gym.rewards import triton_frontend
    made: list = []

    def front():
        if not made:   # at the first launch: importing the CUDA backend costs a worker that runs no kernel nothing
            made.append(triton_frontend.FrontEnd(interpreter, own_definition, triton_own, refuse))
        return made[0]

    def check(executor, args, kwargs):
        fn = REWRITTEN_FROM.get(executor.fn)
        if fn is None:
            raise RuntimeError("a Triton launch of a body the judge did not make from a @triton.jit def: launch "
                               "the kernel with kernel[grid](...)")
        front().check(fn, args, kwargs)
    bounds.before_body.append(check)
    for name, method in triton_frontend.SameBranches.CHECKS.items():
        _PATH_CHECKS[name] = (lambda method: lambda *a, **kw: getattr(front(), method)(*a, **kw))(method)


class _HostReads(ast.NodeTransformer):
    """Routes what reads a kernel value on the host under the interpreter through the judge's checks: calls of
    int, float and math's functions (by the module's name for math, or a name it imported from math), and
    a subscript's index."""
    CALL, INDEX = "__mkgym_host_read__", "__mkgym_host_index__"

    def __init__(self, module_globals: dict):
        import math
        self.math_modules = {n for n, v in module_globals.items() if v is math}
        # (len and range too: len(range(v)) turned a kernel value into a Python int, red teams 26 and 30; a for
        # loop's range(n) is a GPU loop, its iterable not checked here)
        self.host_fns = {n for n, v in module_globals.items() if getattr(v, "__self__", None) is math} | (
            {"int", "float", "len", "range", "list"} - set(module_globals))

    def visit_Call(self, node):
        self.generic_visit(node)
        # a call SameBranches checks is __mkgym_call__(place, f, *args): f is the function called
        checked = isinstance(node.func, ast.Name) and node.func.id == SameBranches.CALL and len(node.args) >= 2
        f = node.args[1] if checked else node.func
        root = f
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(f, ast.Name) and f.id in self.host_fns or \
                isinstance(f, ast.Attribute) and isinstance(root, ast.Name) and root.id in self.math_modules:
            if checked:
                node.args.insert(1, ast.Name(self.CALL, ast.Load()))
                return node
            return ast.copy_location(ast.Call(ast.Name(self.CALL, ast.Load()), [f, *node.args], node.keywords), node)
        return node

    def visit_For(self, node):
        # a for loop's own range(n) / tl.static_range(n) is a GPU loop (SameBranches wraps it as
        # __mkgym_loop__(place, range(n))): its arguments are checked, not the call
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == SameBranches.LOOP \
                and len(it.args) == 2:
            it = it.args[1]
        if isinstance(it, ast.Call):
            it.args = [self.visit(a) for a in it.args]
            it.keywords = [self.visit(k) for k in it.keywords]
        else:
            node.iter = self.visit(node.iter)
        node.target = self.visit(node.target)
        node.body = [self.visit(s) for s in node.body]
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):
            if isinstance(node.slice, ast.Tuple):
                node.slice.elts = [self._index(e) for e in node.slice.elts]
            else:
                node.slice = self._index(node.slice)
        return node

    def _index(self, e):
        if isinstance(e, ast.Slice):   # (red team 26: len(PAD[:v]) read v through a slice's bound)
            for part in ("lower", "upper", "step"):
                if getattr(e, part) is not None:
                    setattr(e, part, self._index(getattr(e, part)))
            return e
        if isinstance(e, ast.Constant):
            return e
        return ast.copy_location(ast.Call(ast.Name(self.INDEX, ast.Load()), [e], []), e)


def autotune_without_benchmarks() -> None:
    """On the cpu backend Triton's interpreter cannot benchmark @triton.autotune's configs (it asks a GPU
    driver: "0 active drivers"), and no timing is claimed there anyway: every config times the same, so the
    first one runs. Correctness does not depend on which config runs."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    Autotuner._bench = lambda self, *a, **kw: [0.0, 0.0, 0.0]


def mark_argument_moves(interpreter, counter) -> None:
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
