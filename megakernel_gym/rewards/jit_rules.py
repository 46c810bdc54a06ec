"""The @triton.jit body rules: what a GPU compile takes, checked on the candidate's source before it runs.
On the cpu backend Triton's interpreter runs a kernel's body as plain Python, re-compiled from the file,
past every hook of the run-time guard (rewards/guard.py), so these rules are that body's wall; the
interpreter runs no def but the ones they read (jit_functions, triton_cpu.interpret_own_source). Taken out
of guard.py.
"""
from __future__ import annotations

import ast
import enum
import functools
import types

JIT_BUILTINS = {"range", "len", "min", "max", "float", "int", "isinstance", "print", "list", "True", "False",
                "None"}
JIT_MODULES = ("triton.language", "triton", "math")
# a jit value's attributes: triton.language's tensor and dtype API, nothing that reaches the interpreter's
# objects under it (handle, to_ir...)
_JIT_VALUE_EXTRA = {"dtype", "shape", "type", "numel", "element_ty", "primitive_bitwidth", "int_bitwidth",
                    "fp_mantissa_width", "exponent_bias", "name", "value", "itemsize", "scalar"}
_JIT_VALUE_DENIED = {"handle", "to_ir", "codegen_name", "mangle", "cache_key_part", "from_ir"}
_JIT_NODES = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.If, ast.IfExp, ast.For,
              ast.While, ast.Break, ast.Continue, ast.Pass, ast.Assert, ast.BinOp, ast.BoolOp, ast.UnaryOp,
              ast.Compare, ast.Call, ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Name,
              ast.Constant, ast.Tuple, ast.List, ast.NamedExpr, ast.expr_context, ast.operator, ast.boolop,
              ast.unaryop, ast.cmpop, ast.arguments, ast.arg, ast.Starred)


@functools.lru_cache(maxsize=None)
def _jit_value_attrs() -> frozenset[str]:
    try:
        import triton.language.core as core
    except ImportError:   # the judge without Triton: the extra names alone
        return frozenset(_JIT_VALUE_EXTRA)
    names = set(_JIT_VALUE_EXTRA)
    # (a tensor descriptor's: desc.load, desc.store, desc.block_shape...; where this Triton has them)
    for cls in (core.tensor, core.dtype, core.pointer_type, core.block_type, core.constexpr,
                getattr(core, "tensor_descriptor_base", core.tensor)):
        names |= {n for n in dir(cls) if not n.startswith("_")}
    return frozenset(names - _JIT_VALUE_DENIED)


def _module_bindings(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Every statement at module level (outside functions and classes) that binds each name."""
    out: dict[str, list[ast.AST]] = {}

    def bind(name, node):
        out.setdefault(name, []).append(node)

    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(st.name, st)
            # what a def or class statement evaluates in module scope (decorators, defaults, annotations, bases):
            # a walrus there rebinds a module name (red team 23: `def f(a=(SM := helper))` turned the constant a
            # jit body read into a Python function the interpreter called); its body is not walked
            for part in _module_scope_parts(st):
                for node in ast.walk(part):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                        bind(node.id, st)
            continue
        # every binding form inside a module-level statement, at any depth (an import inside `if True:`
        # binds at module level; one inside a nested def is counted too, which only makes the rule stricter)
        for node in ast.walk(st):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bind(node.id, st)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    bind(a.asname or a.name.split(".")[0], st)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(node.name, st)
            elif isinstance(node, ast.alias):
                pass
            elif isinstance(node, (ast.ExceptHandler,)) and node.name:
                bind(node.name, st)
            elif isinstance(node, ast.MatchAs) and node.name or isinstance(node, ast.MatchStar) and node.name:
                bind(node.name, st)
    return out


def _module_scope_parts(st: ast.AST) -> list[ast.AST]:
    """The expressions of a def or class statement that run in the scope around it, as it executes."""
    parts = list(st.decorator_list)
    if isinstance(st, ast.ClassDef):
        return parts + list(st.bases) + [k.value for k in st.keywords]
    a = st.args
    parts += a.defaults + [d for d in a.kw_defaults if d is not None]
    parts += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]
              if x is not None and x.annotation is not None]
    return parts + ([st.returns] if st.returns is not None else [])


def _constant_expr(node: ast.AST, consts: set[str], tl_aliases: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, bool, str, type(None)))
    if isinstance(node, ast.UnaryOp):
        return _constant_expr(node.operand, consts, tl_aliases)
    if isinstance(node, ast.BinOp):
        return _constant_expr(node.left, consts, tl_aliases) and _constant_expr(node.right, consts, tl_aliases)
    if isinstance(node, ast.Name):
        return node.id in consts
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in tl_aliases:
        return True   # tl.float32 and the like
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr" \
            and isinstance(node.func.value, ast.Name) and node.func.value.id in tl_aliases:
        return all(_constant_expr(a, consts, tl_aliases) for a in node.args) and not node.keywords
    return False


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted module path a top-level import binds it to."""
    aliases: dict[str, str] = {}
    for st in tree.body:
        if isinstance(st, ast.Import):
            for a in st.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(st, ast.ImportFrom) and not st.level and st.module:
            for a in st.names:
                aliases[a.asname or a.name] = f"{st.module}.{a.name}"
    return aliases


def jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's top-level defs decorated `@triton.jit` (by an import's name for triton or for
    triton.jit): the functions jit_body_problems checks, and the only ones the judge lets Triton's CPU
    interpreter run (triton_cpu.interpret_own_source)."""
    aliases = _module_aliases(tree)

    def is_jit(fn: ast.AST) -> bool:
        for d in getattr(fn, "decorator_list", []):
            t = d.func if isinstance(d, ast.Call) else d
            parts = []
            while isinstance(t, ast.Attribute):
                parts.append(t.attr)
                t = t.value
            if isinstance(t, ast.Name) and aliases.get(t.id, "").split(".")[0] == "triton" and parts \
                    and parts[0] == "jit" or isinstance(t, ast.Name) and aliases.get(t.id) == "triton.jit":
                return True
        return False
    return [st for st in tree.body if isinstance(st, ast.FunctionDef) and is_jit(st)]


def jit_body_problems(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, message) for everything in a @triton.jit function's body that a GPU compile would not
    take or that would reach past it under the interpreter: names other than its arguments and locals,
    triton.language, math, other jit functions of the module, module constants and Triton's builtins;
    attributes other than triton.language's and its values' API; statements Triton does not compile."""
    aliases = _module_aliases(tree)
    bindings = _module_bindings(tree)

    def once(name):   # bound by one module-level statement only: what the jit body sees is what we read
        return len(bindings.get(name, [])) == 1

    modules = {n for n, full in aliases.items() if once(n) and any(
        full == m or full.startswith(m + ".") for m in JIT_MODULES) and not full.startswith("triton.runtime")}
    tl_aliases = {n for n in modules if aliases[n].startswith("triton.language")}

    jit_fns = jit_functions(tree)
    problems: list[tuple[int, str]] = []
    for fn in jit_fns:
        for d in fn.decorator_list:
            t = d.func if isinstance(d, ast.Call) else d
            head = t
            while isinstance(head, ast.Attribute):
                head = head.value
            if not (isinstance(head, ast.Name) and aliases.get(head.id, "").split(".")[0] == "triton"):
                problems.append((getattr(d, "lineno", fn.lineno), f"the decorator {ast.unparse(t)} on the "
                                 f"@triton.jit function {fn.name}: a jit function takes Triton's decorators alone "
                                 "(jit, autotune, heuristics)"))
    jit_names = {f.name for f in jit_fns if once(f.name)}
    consts: set[str] = set()
    changed = True
    while changed:   # constants may be built from constants
        changed = False
        for name, sts in bindings.items():
            if name in consts or not once(name):
                continue
            st = sts[0]
            value = st.value if isinstance(st, (ast.Assign, ast.AnnAssign)) else None
            targets = st.targets if isinstance(st, ast.Assign) else [getattr(st, "target", None)]
            if value is not None and len(targets) == 1 and isinstance(targets[0], ast.Name) \
                    and _constant_expr(value, consts, tl_aliases):
                consts.add(name)
                changed = True
    value_attrs = _jit_value_attrs()

    def bad(node, msg):
        problems.append((getattr(node, "lineno", 0), msg))

    for fn in jit_fns:
        # what the def line evaluates (defaults, annotations) runs as Python under the interpreter: constants,
        # triton.language names and the module's constants only
        for e in fn.args.defaults + [d for d in fn.args.kw_defaults if d is not None] + \
                [a.annotation for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs if a.annotation]:
            if not _constant_expr(e, consts, tl_aliases) and not (
                    isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in tl_aliases):
                problems.append((getattr(e, "lineno", fn.lineno), f"the default or annotation "
                                 f"{ast.unparse(e)[:60]} of the @triton.jit function {fn.name}: constants and "
                                 "triton.language names only"))
        if fn.returns is not None:
            problems.append((fn.lineno, f"a return annotation on the @triton.jit function {fn.name}"))
        local = _jit_locals(fn)
        for stmt in fn.body:
            for node in ast.walk(stmt):
                split = _split_form(node)
                if split:
                    bad(node, f"{split[0]} in the @triton.jit function {fn.name}: {split[1]}")
                    continue
                if not isinstance(node, _JIT_NODES):
                    bad(node, f"{type(node).__name__} in the @triton.jit function {fn.name}: Triton does not "
                              "compile it")
                    continue
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    n = node.id
                    builtin = n in JIT_BUILTINS and n not in bindings   # (red team 23: a module's own `def min`)
                    if n in JIT_BUILTINS and not builtin and n not in local:
                        bad(node, f"the name {n} in the @triton.jit function {fn.name}: the module binds {n} itself, "
                                  f"so the body would call that, not Triton's builtin: give the module's a name of "
                                  "its own")
                    elif n in modules and n not in local and aliases[n] not in JIT_PATH_MODULES \
                            and not _module_path_allowed(aliases[n]):
                        bad(node, f"{aliases[n]} in the @triton.jit function {fn.name}: not part of triton.language "
                                  "or math")
                    elif not (n in local or n in modules or n in jit_names or n in consts or builtin):
                        bad(node, f"the name {n} in the @triton.jit function {fn.name}: a jit body uses its "
                                  "arguments and locals, triton.language, math, the module's other jit functions "
                                  "and constants, and Triton's builtins")
                elif isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
                    # (red team 26: `for triton.next_power_of_2 in (math.isqrt,): pass` rebound the real module's
                    # function for every later candidate in the worker; Triton compiles no store into an attribute
                    # or an item)
                    bad(node, f"the assignment to {ast.unparse(node)[:60]} in the @triton.jit function {fn.name}: a "
                              "jit body assigns plain names only (tl.store writes memory)")
                elif isinstance(node, ast.Attribute):
                    base = node.value
                    path = []
                    while isinstance(base, ast.Attribute):
                        path.append(base.attr)
                        base = base.value
                    if isinstance(base, ast.Name) and base.id in modules and base.id not in local:
                        continue   # tl.x, tl.extra.libdevice.y, math.z: each checked as a whole path below
                    if node.attr not in value_attrs or node.attr.startswith("_"):
                        bad(node, f".{node.attr} in the @triton.jit function {fn.name}: not part of "
                                  "triton.language's tensor and dtype API")
        for node in (n for stmt in fn.body for n in ast.walk(stmt)):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                parts, base = [], node
                while isinstance(base, ast.Attribute):
                    parts.append(base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id in modules and base.id not in local:
                    full = ".".join([aliases[base.id]] + parts[::-1])
                    if not _module_path_allowed(full):
                        bad(node, f"{full} in the @triton.jit function {fn.name}: not part of triton.language "
                                  "or math")
    return sorted(set(problems))


def _split_form(node: ast.AST) -> tuple[str, str] | None:
    """(what, the fix) for a form that Triton's GPU front end and Python (the cpu backend's interpreter) take two
    ways, refused in a jit body; None for any other node. Red team 28: the front end makes a walrus value a tensor
    where the interpreter kept a Python int, so `(c := 1) is 1` was a compile-time False to one and True to the
    other (Triton 3.6 refuses the walrus outright); `is` compares objects, which the two make differently (a constexpr, a tensor, a Python number); a
    loop's `else` block is walked by the front end (static_range) without binding its names, and run by Python."""
    if isinstance(node, ast.NamedExpr):
        return ("a walrus (:=)", "Triton's GPU compile makes its value a tensor where Python keeps it (Triton 3.6 "
                "refuses it): assign the name on a line of its own")
    if isinstance(node, (ast.For, ast.While)) and node.orelse:
        return ("an else block on a loop", "Triton's GPU compile does not run it as Python does: put its statements "
                "after the loop")
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if isinstance(op, (ast.Is, ast.IsNot)) and not any(
                    isinstance(o, ast.Constant) and o.value is None for o in operands[i:i + 2]):
                return (f"`{ast.unparse(node)[:60]}`", "`is` on anything but None compares objects, which Triton's "
                        "GPU compile and Python make differently: use == (or `is None` for an argument left out)")
    return None


def _jit_locals(fn: ast.FunctionDef) -> set[str]:
    """A jit function's arguments and the names it assigns."""
    return {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs} | {
        n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def launch_globals_problem(fn: ast.FunctionDef, namespace: dict) -> str:
    """The wall behind jit_body_problems, at launch: the rules read the file, but the interpreter runs the body in
    the module's globals as they are then (red team 23). Each module name the body (or a default or annotation)
    reads must hold what the rules allowed: one of JIT_PATH_MODULES (or under triton.language) as imported, a
    plain constant or a Triton dtype (a constexpr of one), or a jit function; and no module name may take a
    Triton builtin's place. '' where it holds, else why not."""
    local = _jit_locals(fn)
    parts = list(fn.body) + [p for p in _module_scope_parts(fn) if all(p is not d for d in fn.decorator_list)]
    names = {n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(names - local):
        if name not in namespace:
            continue                                  # Python's builtin, or a NameError when it runs
        value = namespace[name]
        if name in JIT_BUILTINS:
            return (f"the module binds {name}, which the @triton.jit function {fn.name} calls as Triton's builtin")
        if not _launch_value_ok(value):
            return (f"the name {name} in the @triton.jit function {fn.name} is a {type(value).__name__} at launch: a "
                    "jit body reads triton.language, math, the module's jit functions and constants only")
    return ""


def _launch_value_ok(value) -> bool:
    import sys
    if type(value) in (int, float, bool, str, type(None)):
        return True
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", "")
        return sys.modules.get(name) is value and (name in JIT_PATH_MODULES or name.startswith("triton.language."))
    fns = _jit_function_types()
    if not {"JITFunction", "InterpretedFunction"} <= fns.keys():
        return False
    import triton.language.core as core
    if type(value) is core.constexpr:
        return _launch_value_ok(value.value) and not isinstance(value.value, types.ModuleType)
    return isinstance(value, core.dtype) or type(value) in (fns["InterpretedFunction"], fns["JITFunction"])


@functools.lru_cache(maxsize=1)
def _jit_function_types() -> dict[str, type]:
    """Triton's classes of jit functions, by name, those this Triton has: JITFunction, InterpretedFunction (what
    triton.jit makes under TRITON_INTERPRET=1, the cpu backend's worker) and ConstexprFunction (triton.cdiv)."""
    import importlib
    found = {}
    for module, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction"),
                         ("triton.runtime.jit", "ConstexprFunction")):
        try:
            found[name] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            pass
    return found


# the modules a jit body's dotted paths may pass through (a step that lands on any other module, such as
# tl.math.core.typing.operator, is refused)
JIT_PATH_MODULES = {"math", "triton", "triton.language", "triton.language.math", "triton.language.extra",
                    "triton.language.extra.cuda", "triton.language.extra.libdevice",
                    "triton.language.extra.cuda.libdevice"}


def _module_path_allowed(full: str) -> bool:
    """A dotted path a jit body names from a module: resolved step by step on the real modules, every step
    before the last must be one of JIT_PATH_MODULES, and the last a public name of one of them that is not
    itself another module (tl.load, tl.float32, libdevice.exp, math.pi, triton.cdiv)."""
    import importlib
    parts = full.split(".")
    if any(p.startswith("_") for p in parts):
        return False
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return False
    home = obj
    for i, part in enumerate(parts[1:], 1):
        if not isinstance(obj, types.ModuleType):
            # past the module: what it named (tl.float32) may be followed by triton's value API alone
            if not _jit_path_value_ok(obj, home.__name__):
                return False
            if _triton_enum(obj):   # tl.PropagateNan.ALL
                return len(parts) == i + 1 and parts[i] in obj.__members__
            return (type(obj).__module__ or "").startswith("triton.language") and \
                all(p in _jit_value_attrs() for p in parts[i:])
        if obj.__name__ not in JIT_PATH_MODULES:
            return False   # a step from a module that is not one of the allowed ones
        home = obj
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return False
    if isinstance(obj, types.ModuleType):
        return obj.__name__ in JIT_PATH_MODULES
    return _jit_path_value_ok(obj, home.__name__)


def _triton_enum(obj) -> bool:
    """One of Triton's enum classes (tl.PropagateNan): a Python enum in Triton 3.9, a pybind11 enum of triton._C's
    ir in 3.6 (its class is pybind11's, with __members__): an honest combine function that named
    tl.PropagateNan.ALL was refused on the GPU host's Triton 3.6."""
    if not isinstance(obj, type) or not (obj.__module__ or "").startswith("triton."):
        return False
    return issubclass(obj, enum.Enum) or isinstance(getattr(obj, "__members__", None), dict)


def _jit_path_value_ok(obj, module: str) -> bool:
    """What a jit body may name in one of JIT_PATH_MODULES: what a GPU compile treats as part of the kernel
    language. Triton's builtins (tl.load), jit and constexpr functions (tl.sum, triton.cdiv), dtypes and their classes, the
    constexpr, range and static_range classes, its enums (tl.PropagateNan), libdevice's stubs, plain numbers
    and strings, and math's names (C functions and constants). Not the Python helpers, classes and stdlib
    objects these modules also hold: red team 25 ran tl.str_to_ty's eval() with the real builtins from a
    kernel body under the interpreter (numpy computed the answer, numpy.exp slowed for the next candidate)
    and renamed triton.language with tl.math.wraps (functools.wraps), so every later kernel was refused."""
    if module == "math":
        return True
    if type(obj) in (int, float, bool, str):
        return True
    if getattr(obj, "__triton_builtin__", False) is True:
        return True
    fns = _jit_function_types()
    if "JITFunction" not in fns:
        return False
    import triton.language.core as core
    if isinstance(obj, (*fns.values(), core.dtype)) or \
            isinstance(obj, type) and issubclass(obj, core.dtype):   # tl.pointer_type(tl.float32) builds a dtype
        return True
    if isinstance(obj, type) and obj.__module__ == "triton.language.core" and \
            obj.__qualname__ in ("constexpr", "range", "static_range"):
        return True   # (by name: the interpreter leaves its own stand-in in core's static_range after some launches)
    if _triton_enum(obj) or _triton_enum(type(obj)):   # (tl.PropagateNan's home is triton._C's ir)
        return True
    if isinstance(obj, types.FunctionType) and (obj.__module__ or "") == "triton.runtime.interpreter":
        return True   # the interpreter's stand-ins for the builtins, in their place while a launch runs
    return isinstance(obj, types.FunctionType) and (obj.__module__ or "").endswith("libdevice") \
        and (module or "").endswith("libdevice")


