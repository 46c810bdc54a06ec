"""The run-time guard on a candidate's Python: deny by default.

The candidate's module is compiled with RestrictedPython (a maintained library built for running
untrusted Python; its transformer rewrites every attribute read, item read, attribute or item
write, iteration and sequence unpacking into calls of hooks the host provides), with a policy of
ours on top:

- syntax: RestrictedPython's allowlist of node types, less `global`, plus no dunder names
  or attributes (`__init__` and `__call__` may be defined, `super().__init__` called) and no names
  of the hooks' form (`_x_`), so nothing can rebind a hook;
- operators, truth tests and f-strings on tensors go through hooks too: arithmetic, comparison or
  printing of a tensor in Python is torch compute (or a read of its values on the host);
- imports: an allowlist of modules (and of the names `from M import ...` may take);
- attributes: an allowlist per module and per kind of object (tensors, modules, dtypes...); any
  other object's attributes are refused, with the type and the name in the message;
- builtins: a small set (no getattr/setattr/vars/globals/eval/exec/compile/open/type/__import__),
  with float/int/bool/str/sum/max... refusing tensors (they read a tensor's values on the host);
- classes: bases are nn.Module, torch.autograd.Function, `object` or the candidate's own classes
  (a Tensor subclass would reach the dispatcher).

Why not the syntax tree alone: a name check sees `torch.softmax` but not `T = torch; T.softmax`,
`from torch import sys`, or an attribute reached through a parameter. Here every access asks at
the moment it happens, on the object it happens to. The hooks live in this module's closures,
which the candidate's code cannot name. Every refusal is recorded in `Guard.refusals` before the
exception is raised, so a candidate that catches the exception is still rejected.

`@triton.jit` bodies are not run by this code: Triton compiles (or, on the cpu backend, re-executes)
their original source; their rules are the static ones in anticheat.py (`jit_body` checks).
"""
from __future__ import annotations

import ast
import builtins
import functools
import operator
import types
from dataclasses import dataclass, field
from typing import Any

import RestrictedPython.compile
import RestrictedPython.transformer
from RestrictedPython import compile_restricted
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

# the @triton.jit body rules (their own module); the guard compiles a candidate only where they hold
from megakernel_gym.rewards.jit_rules import jit_body_problems


class GuardError(Exception):
    """A candidate did something outside the allowlist. The message names it and what is allowed."""


# ---------------------------------------------------------------------------------------------
# compile time: RestrictedPython's transformer with our names and the extra hooks

# dunder names a candidate may define (methods) or read (`super().__init__`, `__name__` in a main guard)
DEFINABLE_DUNDERS = {"__init__", "__call__"}
READABLE_DUNDERS = {"__init__", "__name__"}


def _is_dunder(name: str) -> bool:
    return len(name) >= 4 and name.startswith("__") and name.endswith("__") or name == "__"


def _is_hook_name(name: str) -> bool:
    return len(name) >= 2 and name.startswith("_") and name.endswith("_") and name != "_"


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
        ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
        ast.BitAnd: "&", ast.MatMult: "@"}
_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "<<": operator.lshift,
          ">>": operator.rshift, "|": operator.or_, "^": operator.xor, "&": operator.and_,
          "@": operator.matmul}
INPLACE = {k + "=": v for k, v in BINARY.items()}
UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert, "not": operator.not_}


def _locate(new: ast.AST, like: ast.AST) -> None:
    """`like`'s position on `new` and on the nodes under it that have none, not walking into a subtree that
    has one: a hook wraps subtrees already visited, and ast.fix_missing_locations walked each again (a
    900-term sum took 4 s to check, quadratic in its depth)."""
    todo = [new]
    while todo:
        node = todo.pop()
        if "lineno" in node._attributes:
            if node is not new and getattr(node, "lineno", None) is not None:
                continue
            for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
                setattr(node, attr, getattr(like, attr, None) if attr.startswith("end") else getattr(like, attr))
        todo.extend(ast.iter_child_nodes(node))


def _copy_locations(new_node: ast.AST, old_node: ast.AST) -> None:
    """RestrictedPython's transformer.copy_locations (the position of the node it replaces, then
    ast.fix_missing_locations), with the fix kept to the new nodes: its wrappers (a subscript's
    `_getitem_`, a loop's `_getiter_`) walked every subtree again, so checking `x[0][0]...` 900 deep took
    1.6 s. Set on RestrictedPython's modules below, the only place their name is looked up."""
    _locate(new_node, old_node)


def _hook(name: str, *args: ast.expr, like: ast.AST) -> ast.Call:
    call = ast.Call(func=ast.Name(name, ast.Load()), args=list(args), keywords=[])
    _locate(call, like)
    return call


RestrictedPython.transformer.copy_locations = RestrictedPython.compile.copy_locations = _copy_locations


class CandidatePolicy(RestrictingNodeTransformer):
    """RestrictedPython's syntax allowlist with the candidate's naming rules and tensor hooks."""

    def check_name(self, node, name, allow_magic_methods=False):
        if name is None:
            return
        if _is_dunder(name):
            if not (allow_magic_methods and name in DEFINABLE_DUNDERS or name == "__name__"):
                self.error(node, f'"{name}" is not allowed: dunder names reach the interpreter\'s internals '
                                 f'(a candidate may define {", ".join(sorted(DEFINABLE_DUNDERS))})')
        elif _is_hook_name(name):
            self.error(node, f'"{name}" is not allowed: names that start and end with "_" are the judge\'s')
        elif name.endswith("__roles__") or name in ("printed",):
            self.error(node, f'"{name}" is a reserved name')

    def visit_Attribute(self, node: ast.Attribute):
        if _is_dunder(node.attr) and node.attr not in READABLE_DUNDERS:
            self.error(node, f'"{node.attr}" is not allowed: dunder attributes reach the interpreter\'s '
                             "internals")
        if node.attr in INSPECT_ATTRIBUTES:
            self.error(node, f'"{node.attr}" is not allowed: frames, code and tracebacks reach every name')
        if isinstance(node.ctx, ast.Load):
            node = self.node_contents_visit(node)
            return _hook("_getattr_", node.value, ast.Constant(self._mangled(node.attr)), like=node)
        node = self.node_contents_visit(node)
        node.value = _hook("_write_", node.value, like=node.value)
        return node

    def visit_Global(self, node):
        self.error(node, "global statements are not allowed: state kept across calls")

    def visit_Nonlocal(self, node):
        for name in node.names:
            self.check_name(node, name)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        """`n: int = 3`, a dataclass field: an assignment whose target the usual rules check."""
        if isinstance(node.target, ast.Name):
            self.check_name(node, node.target.id)
        return self.node_contents_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef):
        self._classes = getattr(self, "_classes", []) + [node.name]
        try:
            return super().visit_ClassDef(node)
        finally:
            self._classes.pop()

    def _mangled(self, attr: str) -> str:
        """`self.__x` inside class C is `self._C__x` (Python's private names): the string the hook gets
        must be the mangled one, since the hook's getattr does not mangle."""
        classes = getattr(self, "_classes", [])
        if attr.startswith("__") and not attr.endswith("__") and classes and classes[-1].lstrip("_"):
            return f"_{classes[-1].lstrip('_')}{attr}"
        return attr

    def visit_AugAssign(self, node: ast.AugAssign):
        """`self.count += 1`, `acc[i] += x`: RestrictedPython refuses these; here they are read through
        the item/attribute hooks, combined through `_inplacevar_`, and written through `_write_`, when the
        target's object (and index) are plain names, constants or attribute chains (evaluated twice)."""
        target = node.target
        if isinstance(target, ast.Name):
            return super().visit_AugAssign(node)

        def plain(e):
            return all(isinstance(n, (ast.Name, ast.Attribute, ast.Constant, ast.Load, ast.Slice, ast.Tuple,
                                      ast.UnaryOp, ast.USub)) for n in ast.walk(e))
        if not (isinstance(target, (ast.Attribute, ast.Subscript)) and plain(target.value)
                and (not isinstance(target, ast.Subscript) or plain(target.slice))):
            self.error(node, "augmented assignment to an attribute or item of a computed object is not allowed")
            return node
        load = ast.Attribute(value=target.value, attr=target.attr, ctx=ast.Load()) if isinstance(
            target, ast.Attribute) else ast.Subscript(value=target.value, slice=target.slice, ctx=ast.Load())
        _locate(load, target)
        op = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=",
              ast.Pow: "**=", ast.LShift: "<<=", ast.RShift: ">>=", ast.BitOr: "|=", ast.BitXor: "^=",
              ast.BitAnd: "&=", ast.MatMult: "@="}[type(node.op)]
        import copy
        store = copy.deepcopy(target)
        store.ctx = ast.Store()
        value = _hook("_inplacevar_", ast.Constant(op), self.visit(load), self.visit(node.value), like=node)
        assign = ast.Assign(targets=[self.visit(store)], value=value)
        _locate(assign, node)
        return assign

    def visit_BinOp(self, node: ast.BinOp):
        node = self.node_contents_visit(node)
        return _hook("_binop_", ast.Constant(_OPS[type(node.op)]), node.left, node.right, like=node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        node = self.node_contents_visit(node)
        return _hook("_unop_", ast.Constant(_UNARY[type(node.op)]), node.operand, like=node)

    def visit_Compare(self, node: ast.Compare):
        node = self.node_contents_visit(node)
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return node
        node.left = _hook("_value_", node.left, like=node.left)
        node.comparators = [_hook("_value_", c, like=c) for c in node.comparators]
        return node

    def _truth(self, node):
        node = self.node_contents_visit(node)
        node.test = _hook("_value_", node.test, like=node.test)
        return node

    visit_If = visit_While = visit_IfExp = visit_Assert = _truth

    def visit_BoolOp(self, node: ast.BoolOp):
        node = self.node_contents_visit(node)
        node.values = [_hook("_value_", v, like=v) for v in node.values]
        return node

    def visit_FormattedValue(self, node: ast.FormattedValue):
        node = self.node_contents_visit(node)
        node.value = _hook("_value_", node.value, like=node.value)
        return node


def compile_candidate(source: str, filename: str) -> types.CodeType:
    """The candidate's module, compiled under the policy, its @triton.jit bodies checked (jit_body_problems).
    Raises SyntaxError naming every refusal, problem.SourceTooDeep past the depth the checks follow."""
    from megakernel_gym.rewards.problem import ast_depth, deep_call, parse_python
    tree = parse_python(source, filename)       # its depth, then the jit rules read it
    return deep_call(_compile_candidate, source, filename, tree, depth=ast_depth(tree))


def _compile_candidate(source: str, filename: str, tree: ast.Module) -> types.CodeType:
    from megakernel_gym.rewards.problem import AST_LOCK
    # RestrictedPython parses and compiles a tree too: both under the one lock (python/cpython#106905)
    with AST_LOCK:
        problems = jit_body_problems(tree)
        if problems:
            raise SyntaxError(tuple(f"Line {line}: {msg}" for line, msg in problems))
        import warnings
        with warnings.catch_warnings():   # RestrictedPython's notes on print (we send prints to the log)
            warnings.simplefilter("ignore", SyntaxWarning)
            return compile_restricted(source, filename, "exec", policy=CandidatePolicy)


# ---------------------------------------------------------------------------------------------
# run time: what each kind of object lets a candidate reach

# modules a candidate may import, and the names of each it may use (None: every public name)
TORCH_NAMES = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "Size", "device", "dtype", "is_tensor",
    "is_floating_point", "no_grad", "inference_mode", "finfo", "iinfo", "get_default_dtype",
    "promote_types", "result_type", "Tensor", "nn", "cuda", "autograd",
    "float32", "float", "float16", "half", "bfloat16", "float64", "double", "int8", "uint8", "int16",
    "short", "int32", "int", "int64", "long", "bool", "uint16", "uint32", "uint64", "complex64",
    "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "contiguous_format", "channels_last", "strided", "utils",
}
# drawn in __init__ the way a problem's own Model draws its parameters; never in forward
TORCH_INIT_NAMES = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "normal", "randperm"}
MODULE_NAMES: dict[str, set[str] | None] = {
    "torch": TORCH_NAMES,
    "torch.nn": {"Module", "Parameter", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
                 "Buffer", "Sequential", "init", "functional"},   # + layer classes, see _nn_name
    "torch.nn.init": None,          # init phase only (see Guard.attr)
    "torch.nn.functional": set(),   # importable (LLM answers import it), nothing in it usable
    "torch.cuda": {"current_device", "current_stream", "is_available", "get_device_capability",
                   "get_device_properties", "device_count", "device", "get_device_name"},
    "torch.autograd": {"Function"},
    "torch.utils": {"cpp_extension"},
    "torch.utils.cpp_extension": {"load_inline"},
    "triton": {"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language"},
    "triton.language": None, "triton.language.extra": None, "triton.language.extra.cuda": None,
    "triton.language.extra.libdevice": None, "triton.language.math": None,
    "triton.tools.tensor_descriptor": {"TensorDescriptor"},   # a host-side TMA descriptor (anticheat.KERNEL_TOOLS_ALLOWED)
    "math": None,
    "itertools": {"chain", "product", "count", "repeat", "islice", "zip_longest", "permutations",
                  "combinations", "combinations_with_replacement", "cycle", "pairwise", "takewhile",
                  "dropwhile", "compress", "tee", "filterfalse"},
    # (`wraps` is the guard's own, Guard._wraps: functools.wraps copies attributes named by its caller,
    # `__dict__` by default, and ran in functools, past the guard: `wraps(torch)(holder)` handed a candidate
    # torch's whole namespace, `_C` and `sys.modules` with it; red team 8)
    "functools": {"partial", "reduce", "lru_cache", "cache", "wraps", "cached_property"},
    "operator": {n for n in dir(operator) if not n.startswith("_")} - {"attrgetter", "methodcaller"},
    "typing": {"Optional", "List", "Tuple", "Dict", "Any", "Union", "Sequence", "Callable", "Iterable",
               "Iterator", "Mapping", "Set", "FrozenSet", "Type", "NamedTuple", "Literal", "Final",
               "TYPE_CHECKING"},
    "collections": {"namedtuple", "defaultdict", "OrderedDict", "deque", "Counter"},
    "dataclasses": {"dataclass", "field"},
    "megakernel_gym": {"load_cuda"},
    "__future__": {"annotations"},
}
# submodules that `import a.b` may name (the import statement's full path)
IMPORTABLE = set(MODULE_NAMES) - {"torch.utils"}

# tensor attributes: metadata, views, copies, allocation. Compute (and reads of values on the host:
# item, tolist, numpy) is refused.
TENSOR_NAMES = {
    "shape", "dtype", "device", "ndim", "is_cuda", "is_contiguous", "stride", "size", "numel", "dim",
    "element_size", "nelement", "data_ptr", "storage_offset", "contiguous", "view", "view_as",
    "reshape", "reshape_as", "permute", "transpose", "t", "T", "mT", "unsqueeze", "squeeze",
    "expand", "expand_as", "flatten", "unflatten", "narrow", "select", "split", "chunk", "unbind",
    "clone", "detach", "copy_", "fill_", "zero_", "new_empty", "new_zeros", "new_ones", "new_full",
    "new_empty_strided", "to", "float", "half", "bfloat16", "int", "long", "double", "bool", "short",
    "char", "byte", "cuda", "is_floating_point", "is_complex", "requires_grad", "requires_grad_",
    "itemsize", "nbytes", "layout", "as_strided", "unfold", "movedim", "diagonal", "get_device",
    "is_leaf", "data", "type_as", "is_meta",
}
# tensor methods that hand the candidate the tensor's memory as a host object (a numpy array or a storage over
# the same bytes), refused in __init__ too: red team 10 kept `self.a = self.buf.numpy()` from __init__, then in
# forward copied the input into buf and computed softmax in numpy, which no aten op sees
HOST_MEMORY_METHODS = {"numpy", "untyped_storage", "storage"}
# tensor methods that run a Python callable of the candidate's over the values, in C++ where no aten op is
# dispatched: red team 14 kept `self.ap = self.buf.apply_` from __init__, then in forward copied the input into
# buf and computed softmax in plain Python floats through it (apply_ to read, apply_ to write back). Refused in
# __init__ and, however reached, in forward (TENSOR_VALUE_DUNDERS)
HOST_CALLBACK_METHODS = ("apply_", "map_", "map2_")
# nn.Module's own API that a candidate may use (its own attributes, parameters, buffers and
# submodules are reached through the instance)
MODULE_API = {
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
    "modules", "named_modules", "register_buffer", "register_parameter", "add_module", "training",
    "eval", "train", "to", "cuda", "half", "float", "bfloat16", "double", "state_dict",
    "load_state_dict", "weight", "bias", "requires_grad_", "zero_grad",
}
_SCALAR_TYPES = (int, float, complex, bool, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset, range, slice)


@dataclass
class Guard:
    """The hooks for one candidate worker. `phase` is set by the worker ('import', 'init',
    'forward'); `refusals` keeps every refusal, caught by the candidate or not."""
    torch: Any
    candidate_module: str = ""
    phase: str = "import"
    refusals: list[str] = field(default_factory=list)

    def __post_init__(self):
        torch = self.torch
        self.Tensor = torch.Tensor
        self.Module = torch.nn.Module
        self._own_types: set[type] = set()
        self._kernel_types = _kernel_types()
        self._tensor_descriptor = _tensor_descriptor_type()
        self._modules = {name: None for name in MODULE_NAMES}
        self._functools = self._safe_functools()
        self._dataclasses = self._safe_dataclasses()
        self._proxies = {"functools": self._functools, "dataclasses": self._dataclasses}

    def reset(self) -> None:
        """A new candidate in this worker: no refusals, no classes of its own yet."""
        self.refusals.clear()
        self._own_types.clear()
        self.phase = "import"

    # -- refusals ----------------------------------------------------------------------------
    def refuse(self, what: str, hint: str = "") -> GuardError:
        msg = f"{what} is outside what a candidate may use{': ' + hint if hint else ''}"
        self.refusals.append(msg)
        return GuardError(msg)

    def _no_tensor(self, value, what: str):
        """In forward, a tensor in Python arithmetic, a comparison, a truth test or a value-reading builtin
        is torch compute or a read of its values on the host. (__init__ may compute its parameters the way
        the problem's Model does: `torch.randn(shape) * 0.02`.)"""
        if self.phase == "forward" and (isinstance(value, self.Tensor) or type(value).__module__ == "numpy"):
            raise self.refuse(what, "that is torch compute or a read of a tensor's values on the host; "
                                    "compute in your own kernel")
        return value

    # -- attribute reads ---------------------------------------------------------------------
    def getattr(self, obj, name: str, *default):
        if not isinstance(name, str):
            raise self.refuse(f"an attribute name of type {type(obj).__name__}")
        if self._attr_allowed(obj, name):
            if isinstance(obj, types.ModuleType) and obj.__name__ in self._proxies:
                obj = self._proxies[obj.__name__]   # the real module is only reached by judge code; its names are ours
            value = getattr(obj, name, *default)
            if callable(value) and not isinstance(value, type):
                if isinstance(obj, self.Tensor):
                    return self._tensor_args(value, f"tensor.{name}", TENSOR_ARG_METHODS.get(name, ()))
                if isinstance(obj, types.ModuleType) and obj.__name__ == "torch":
                    return self._tensor_args(value, f"torch.{name}", (0,) if name.endswith("_like")
                                             or name in ("is_tensor", "is_floating_point") else ())
            return value
        where = obj.__name__ if isinstance(obj, types.ModuleType) else _describe(obj)
        raise self.refuse(f"{where}.{name}", self._hint(obj))

    def _attr_allowed(self, obj, name: str) -> bool:
        if _is_dunder(name):
            return name == "__init__" and (isinstance(obj, super) or obj is self.Module) or \
                name == "__name__" and isinstance(obj, types.FunctionType) and self._own_function(obj)
        if isinstance(obj, types.ModuleType):
            return self._module_attr(obj, name)
        if isinstance(obj, self.Tensor):
            # __init__ may initialize as the problem's Model does (weight.uniform_(-b, b), .data.normal_()):
            # what it computes there is replaced by Model's weights, and depends on no input
            return name in TENSOR_NAMES or self.phase == "init" and not name.startswith("_") \
                and name not in HOST_MEMORY_METHODS and name not in HOST_CALLBACK_METHODS
        if isinstance(obj, type):
            # a class: the candidate's own classes expose what their bodies define (methods,
            # constants); torch's, Python's and Triton's classes expose nothing but autograd's apply
            own = [c for c in obj.__mro__ if c in self._own_types]
            if any(name in vars(c) for c in own):
                return True
            if obj is self._tensor_descriptor:
                return name == "from_tensor"
            return name == "apply" and issubclass(obj, self.torch.autograd.Function) and bool(own)
        if isinstance(obj, self.Module):
            return self._module_instance_attr(obj, name)
        if isinstance(obj, super):
            return not name.startswith("_") and name in MODULE_API | {"forward"}
        if type(obj) in self._own_types:
            d = getattr(obj, "__dict__", None)
            return isinstance(d, dict) and name in d or not _defined_outside(type(obj), name, self._own_types)
        if isinstance(obj, _SCALAR_TYPES) or isinstance(obj, _CONTAINERS):
            return not name.startswith("_")
        if isinstance(obj, str):
            return not name.startswith("_") and name not in ("format", "format_map")
        if isinstance(obj, (self.torch.dtype, self.torch.device, self.torch.Size, self.torch.finfo,
                            self.torch.iinfo)):
            return not name.startswith("_")
        if isinstance(obj, self._kernel_types):
            return False   # launch with kernel[grid](...), nothing else
        mod = type(obj).__module__ or ""
        if mod.startswith("triton.language") or type(obj).__name__ in ("Config", "_DeviceProperties"):
            # tl.dtype, tl.constexpr, triton.Config, device properties; not a list, dict or set they share
            # (red team 9: tl.float32.FP_TYPES.remove('fp32') changed every later kernel's dtypes in the worker)
            return not name.startswith("_") and not isinstance(getattr(obj, name, None), (list, dict, set))
        if mod.startswith("torch.cuda") and type(obj).__name__ == "Stream":
            return name in ("cuda_stream", "device", "device_index")
        return _kernel_module_attr(obj, name)

    def _module_attr(self, mod: types.ModuleType, name: str) -> bool:
        mname = mod.__name__
        if mname not in MODULE_NAMES:
            return False
        allowed = MODULE_NAMES[mname]
        if mname == "torch.nn.init" and self.phase != "init":
            return False
        if mname == "torch" and name in TORCH_INIT_NAMES:
            return self.phase == "init"
        if allowed is None:
            # every public name the module defines itself: not a module, and nothing it imported from
            # elsewhere (red team 9: triton.language.math re-exports functools.wraps, triton.language.extra
            # sys.modules as `modules`, importlib's module_from_spec)
            if f"{mname}.{name}" in MODULE_NAMES:
                return True
            value = getattr(mod, name, None)
            return not name.startswith("_") and not isinstance(value, types.ModuleType) and _own_value(value, mname)
        if name in allowed:
            return True
        return mname == "torch.nn" and _nn_layer(mod, name)

    def _module_instance_attr(self, m, name: str) -> bool:
        # parameters, buffers, submodules and plain attributes of this instance
        d = object.__getattribute__(m, "__dict__")
        if name in d.get("_parameters", {}) or name in d.get("_buffers", {}) or name in d.get("_modules", {}):
            # (a key that is also a class attribute reads the class's: `layer._modules.update({"forward": ...})`
            # made a torch layer's forward, _call_impl or _apply readable, red team 9)
            return not hasattr(type(m), name)
        if name in d:
            return not callable(d[name]) or type(m) in self._own_types or _is_kernel_like(d[name], self)
        # class attributes: the candidate's own classes' definitions, nn.Module's allowed API,
        # and a torch layer's configuration (in_features, eps, ...)
        if not _defined_outside(type(m), name, self._own_types):
            return True
        if name in MODULE_API:
            return True
        value = getattr(type(m), name, None)
        return not name.startswith("_") and value is not None and not callable(value) \
            and not isinstance(value, property)

    def _own_function(self, fn) -> bool:
        return getattr(fn, "__module__", None) == self.candidate_module

    def _safe_functools(self) -> types.ModuleType:
        """What `import functools` gives a candidate: a module of the allowed names, `wraps` the guard's."""
        import functools
        mod = types.ModuleType("functools")
        for n in MODULE_NAMES["functools"]:
            setattr(mod, n, getattr(functools, n))
        mod.wraps = self._wraps
        return mod

    def _safe_dataclasses(self) -> types.ModuleType:
        """What `import dataclasses` gives a candidate: `field`, and `dataclass` for its own classes only
        (dataclass writes __repr__, __eq__, __hash__... into the class it is given, from dataclasses, past the
        guard's write hook: red team 9 rewrote nn.Linear's repr and made every module unhashable)."""
        import dataclasses
        mod = types.ModuleType("dataclasses")
        mod.field = dataclasses.field
        guard = self

        def dataclass(cls=None, /, **kw):
            def wrap(c):
                if not (isinstance(c, type) and c in guard._own_types):
                    raise guard.refuse(f"dataclasses.dataclass on {_describe(c)}", "it decorates a class of your own")
                return dataclasses.dataclass(c, **kw)
            return wrap if cls is None else wrap(cls)
        dataclass.__module__ = "dataclasses"
        mod.dataclass = dataclass
        return mod

    def _wraps(self, wrapped, *args, **kw):
        """functools.wraps for a candidate's decorators: the wrapper (its own function) takes the wrapped
        callable's name, qualified name and docstring, if they are strings, and `__wrapped__`; nothing else.
        functools' own copies the attributes its caller names and the wrapped object's `__dict__`, outside
        the guard (a module's namespace into an object whose attributes the candidate may read)."""
        guard = self
        if args or kw:
            raise self.refuse("functools.wraps with assigned= or updated=",
                              "wraps(fn) copies the name and docstring only")

        def decorate(wrapper):
            if not (isinstance(wrapper, types.FunctionType) and guard._own_function(wrapper)):
                raise guard.refuse(f"functools.wraps(...) applied to {_describe(wrapper)}",
                                   "it decorates a function of your own")
            for n in ("__name__", "__qualname__", "__doc__"):
                v = getattr(wrapped, n, None)
                if isinstance(v, str):
                    setattr(wrapper, n, v)
            wrapper.__wrapped__ = wrapped
            return wrapper
        return decorate

    def _hint(self, obj) -> str:
        if isinstance(obj, types.ModuleType) and obj.__name__ in MODULE_NAMES:
            allowed = MODULE_NAMES[obj.__name__]
            names = "every public name it defines itself" if allowed is None else ", ".join(sorted(allowed)[:40]) or "nothing"
            return f"of {obj.__name__} a candidate may use {names}"
        if isinstance(obj, types.ModuleType):
            return f"the module {obj.__name__} is not one a candidate may use"
        if isinstance(obj, self.Tensor):
            return "a tensor's metadata, views and copies are allowed; its compute belongs in your kernel"
        return "only the allowlisted attributes of tensors, modules and the candidate's own objects"

    def _tensor_args(self, fn, label: str, tensor_positions: tuple):
        """torch's allocation calls and a tensor's methods take sizes, dims and dtypes. A tensor given
        where they take an int is read on the host in C++ (past Tensor.__index__): `torch.empty(t)`,
        `x.select(0, i_tensor)`, `x.narrow(0, t, 1)`. In forward only the positions that take a tensor
        (`torch.empty_like(x)`, `y.copy_(x)`) may be one."""
        guard = self

        def call(*a, **kw):
            if guard.phase == "forward":
                for i, v in enumerate(a):
                    if i not in tensor_positions and _holds_tensor(v, guard.Tensor):
                        raise guard.refuse(f"a tensor as argument {i} of {label}",
                                           "sizes, dims and indices are Python ints; a tensor there is read on "
                                           "the host")
                for k, v in kw.items():
                    if _holds_tensor(v, guard.Tensor) and not (0 in tensor_positions and k in ("src", "other")):
                        raise guard.refuse(f"a tensor as {label}'s {k}=",
                                           "sizes, dims and indices are Python ints")
            return fn(*a, **kw)
        call.__name__ = label
        return call

    # -- writes, items, iteration, calls -----------------------------------------------------
    def write(self, obj):
        if isinstance(obj, types.ModuleType) or isinstance(obj, type) and obj not in self._own_types:
            raise self.refuse(f"assignment to an attribute of {_describe(obj)}")
        if isinstance(obj, self.Module) or type(obj) in self._own_types or isinstance(obj, (list, dict, set)):
            return obj
        if isinstance(obj, self.Tensor):
            return _TensorWriter(self, obj)
        raise self.refuse(f"assignment into {_describe(obj)}")

    def getitem(self, obj, key):
        if isinstance(obj, self.Tensor):
            self._basic_index(key)
        else:
            self._no_tensor(key, "an index that is a tensor")
        return obj[key]

    def _basic_index(self, key):
        if self.phase != "forward":
            return
        for k in key if isinstance(key, tuple) else (key,):
            if not (k is None or k is Ellipsis or isinstance(k, (int, slice))) or isinstance(k, bool):
                raise self.refuse(f"indexing a tensor with {type(k).__name__}",
                                  "only integers, slices, None and ... (views); gathers belong in your kernel")
            if isinstance(k, slice) and any(isinstance(v, self.Tensor) for v in (k.start, k.stop, k.step)):
                raise self.refuse("a slice bounded by a tensor")

    def binop(self, op: str, a, b):
        self._no_tensor(a, f"the operator {op} on a tensor")
        self._no_tensor(b, f"the operator {op} on a tensor")
        return BINARY[op](a, b)

    def unop(self, op: str, a):
        self._no_tensor(a, f"the operator {op} on a tensor")
        return UNARY[op](a)

    def inplacevar(self, op: str, a, b):
        self._no_tensor(a, f"the operator {op} on a tensor")
        self._no_tensor(b, f"the operator {op} on a tensor")
        return INPLACE[op](a, b)

    def value(self, v):
        return self._no_tensor(v, "a tensor's truth value, comparison or formatting")

    def getiter(self, obj):
        return iter(obj)

    def apply(self, f, *a, **kw):
        return f(*a, **kw)

    # -- imports and classes -----------------------------------------------------------------
    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        if isinstance(fromlist, list):
            # C code importing while a candidate frame is the current one (torch's lazy imports inside
            # empty_like, say): CPython's PyImport_Import finds __import__ in the current frame's builtins
            # and passes an empty list. An import statement passes None or a tuple, and the candidate
            # cannot call this hook itself (it cannot name __import__ nor reach its builtins).
            return builtins.__import__(name, globals, locals, fromlist, level)
        if level:
            raise self.refuse("a relative import")
        if name not in IMPORTABLE:
            raise self.refuse(f"import of {name!r}", "a candidate may import "
                              + ", ".join(sorted(m for m in IMPORTABLE if "." not in m or m == "torch.nn")))
        mod = builtins.__import__(name, globals, locals, fromlist, level)
        if name in self._proxies:
            mod = self._proxies[name]
        if fromlist:
            for n in fromlist:
                if n == "*" or not self._module_attr(mod, n) and f"{name}.{n}" not in IMPORTABLE:
                    raise self.refuse(f"from {name} import {n}", self._hint(mod))
        return mod

    def build_class(self, name, bases, ns):
        for b in bases:
            if not (b is object or b in self._own_types or b is self.Module or b is self.torch.autograd.Function):
                raise self.refuse(f"class {name} derived from {_describe(b)}",
                                  "a candidate's classes derive from nn.Module, torch.autograd.Function, "
                                  "object or its own classes")
        cls = type(name, bases, ns)
        self._own_types.add(cls)
        return cls

    # -- the module's namespace --------------------------------------------------------------
    def namespace(self, module_name: str) -> dict:
        self.candidate_module = module_name
        return {"__builtins__": self.builtins(), "__name__": module_name, "__metaclass__": self.build_class,
                "_getattr_": self.getattr, "_write_": self.write, "_getitem_": self.getitem,
                "_getiter_": self.getiter, "_apply_": self.apply, "_binop_": self.binop, "_unop_": self.unop,
                "_inplacevar_": self.inplacevar, "_value_": self.value, "_print_": self.printer,
                "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
                "_unpack_sequence_": guarded_unpack_sequence}

    def builtins(self) -> dict:
        g = self

        def tensor_free(fn, label):
            def call(*a, **kw):
                for v in list(a) + list(kw.values()):
                    g._no_tensor(v, f"{label}() of a tensor")
                return fn(*a, **kw)
            call.__name__ = label
            return call

        b = {n: getattr(builtins, n) for n in SAFE_BUILTINS}
        for n in READS_VALUES:
            b[n] = tensor_free(getattr(builtins, n), n)
        b.update({
            "__import__": self.import_, "__build_class__": builtins.__build_class__,
            "getattr": self.getattr, "hasattr": self.hasattr, "setattr": self.setattr,
            "isinstance": isinstance, "issubclass": issubclass, "super": super,
        })
        return b

    def hasattr(self, obj, name: str) -> bool:
        """An attribute the object has but a candidate may not use is a refusal, as reading it is: a quiet
        False would tell a kernel it runs under the judge (red team 8: `if hasattr(self, "apply")`, False
        here and True in the exported module, returned zeros there and scored correct here)."""
        if not isinstance(name, str):
            return False
        if self._attr_allowed(obj, name):
            return hasattr(obj, name)
        if _native_hasattr(obj, name):
            where = obj.__name__ if isinstance(obj, types.ModuleType) else _describe(obj)
            raise self.refuse(f"hasattr({where}, {name!r})", self._hint(obj))
        return False

    def setattr(self, obj, name: str, value) -> None:
        if not isinstance(name, str) or _is_dunder(name) or _is_hook_name(name):
            raise self.refuse(f"setattr of {name!r}")
        setattr(self.write(obj), name, value)

    def printer(self, _getattr=None):
        guard = self

        class Printer:
            def _call_print(self, *objects, **kw):
                import sys
                for o in objects:
                    guard._no_tensor(o, "print() of a tensor")
                kw.pop("file", None)
                print(*objects, file=sys.stdout, **kw)
        return Printer()

    def install_checks(self, exempt=lambda: False) -> None:
        """Checks on torch's own classes in the candidate's worker, for what the candidate's code does
        without an attribute access: calling one of torch's layers (nn.Linear...) in forward is torch
        compute; a tensor's operators, comparisons, items and value reads (`__index__`, `__float__`,
        `__bool__`, `item`, `tolist`, `numpy`...) in forward are torch compute or a read of its values on
        the host, however they are reached (`operator.add`, `range(t)`, `lst[t]`, `math.exp(t)`...).
        `exempt()` is true while the judge itself moves data for a kernel launch (Triton's CPU
        interpreter reads its arguments through numpy). The candidate cannot undo these: it cannot reach
        a dunder attribute."""
        guard, Module, Tensor = self, self.Module, self.Tensor
        plain_call = Module.__call__

        def own_chain(module) -> bool:   # nn.Sequential of the candidate's own modules: it only chains them
            return type(module) is guard.torch.nn.Sequential and all(
                type(c) in guard._own_types or own_chain(c) for c in module.children())

        def __call__(module, *a, **kw):
            if guard.phase == "forward" and type(module) not in guard._own_types and not own_chain(module):
                raise guard.refuse(f"calling torch's layer {type(module).__name__} in forward",
                                   "a torch layer may hold the weights; its compute belongs in your kernel")
            return plain_call(module, *a, **kw)
        Module.__call__ = __call__

        def checked(name, plain, index_arg=False):
            def method(t, *a, **kw):
                if guard.phase == "forward" and not exempt():
                    if index_arg:
                        guard._basic_index(a[0] if a else None)
                    else:
                        raise guard.refuse(f"tensor.{name} in forward", "that is torch compute or a read of a "
                                           "tensor's values on the host; compute in your own kernel")
                return plain(t, *a, **kw)
            method.__name__ = name
            return method
        for name in TENSOR_VALUE_DUNDERS:
            plain = getattr(Tensor, name, None)
            if plain is not None:
                setattr(Tensor, name, checked(name, plain))
        for name in ("__getitem__", "__setitem__"):
            setattr(Tensor, name, checked(name, getattr(Tensor, name), index_arg=True))



# a tensor's methods that take another tensor (at argument 0); every other method takes none in forward
TENSOR_ARG_METHODS = {name: (0,) for name in ("copy_", "expand_as", "view_as", "reshape_as", "type_as", "to")}


def _holds_tensor(v, Tensor) -> bool:
    return isinstance(v, Tensor) or isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v)


# torch.Tensor's methods that compute or read values, however the candidate's code reaches them: refused
# in forward (Guard.install_checks)
TENSOR_VALUE_DUNDERS = tuple(f"__{op}__" for op in (
    "add", "radd", "iadd", "sub", "rsub", "isub", "mul", "rmul", "imul", "truediv", "rtruediv", "itruediv",
    "floordiv", "rfloordiv", "ifloordiv", "mod", "rmod", "imod", "pow", "rpow", "ipow", "matmul", "rmatmul",
    "imatmul", "and", "rand", "iand", "or", "ror", "ior", "xor", "rxor", "ixor", "lshift", "rlshift",
    "ilshift", "rshift", "rrshift", "irshift", "neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt",
    "ge", "index", "int", "float", "complex", "bool", "contains", "array", "format", "reversed", "div",
    "rdiv", "idiv")) + ("item", "tolist", "numpy") + HOST_CALLBACK_METHODS

SAFE_BUILTINS = (
    "None", "True", "False", "Ellipsis", "NotImplemented", "len", "enumerate", "zip", "map",
    "filter", "reversed", "list", "tuple", "dict", "set", "frozenset", "slice", "callable", "chr", "ord",
    "id", "iter", "next", "object", "property", "staticmethod", "classmethod",
    "Exception", "ValueError", "TypeError", "RuntimeError", "AssertionError", "NotImplementedError",
    "KeyError", "IndexError", "AttributeError", "ZeroDivisionError", "ArithmeticError", "StopIteration",
    "SystemExit", "OverflowError", "LookupError", "MemoryError",
)
# builtins that read a value: refused on a tensor (on the host, that is a copy of its data)
READS_VALUES = ("float", "int", "bool", "complex", "str", "repr", "format", "abs", "round", "sum", "max",
                "min", "sorted", "any", "all", "divmod", "pow", "hash", "range")


class _TensorWriter:
    """`t[i] = v` on a tensor: a basic index only (a view's fill or copy)."""

    def __init__(self, guard: Guard, t):
        self._guard, self._t = guard, t

    def __setitem__(self, key, value):
        self._guard._basic_index(key)
        self._t[key] = value

    def __setattr__(self, name, value):
        if name in ("_guard", "_t"):
            object.__setattr__(self, name, value)
        else:
            raise self._guard.refuse(f"assignment to tensor attribute {name}")


@functools.lru_cache(maxsize=1)
def _tensor_descriptor_type() -> type | None:
    """Triton's host-side tensor descriptor class (TensorDescriptor.from_tensor is a candidate's), where this Triton
    has one (asked of each argument of each launch: launch_args._descriptor_problem)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    return TensorDescriptor


def _kernel_types() -> tuple[type, ...]:
    out: list[type] = []
    try:
        from triton.runtime.jit import JITFunction
        out.append(JITFunction)
        from triton.runtime.autotuner import Autotuner, Heuristics
        out += [Autotuner, Heuristics]
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        out.append(InterpretedFunction)
    except ImportError:
        pass
    return tuple(out)


def _kernel_module_attr(obj, name: str) -> bool:
    """A module of the candidate's own CUDA kernels: load_cuda's (its kernels by name and its small API)
    or load_inline's (the functions it exported)."""
    if name.startswith("_"):
        return False
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if kind == CUDA_MODULE_TYPE:
        return name in obj.signatures or name in ("get_function", "kernel_names", "set_max_dynamic_smem", "name")
    return kind in KERNEL_MODULE_TYPES


# The judge's own types a candidate's code holds, named as strings (the guard imports none of them): the
# modules load_cuda and load_inline return, and every module of the fast load_inline (rewards/inline/), whose objects
# (its exported functions) a candidate calls. tests/test_guard_names.py checks each names a real one.
CUDA_MODULE_TYPE = "megakernel_gym.cuda.nvrtc.CudaModule"      # what load_cuda returns
KERNEL_MODULE_TYPES = ("megakernel_gym.rewards.sandbox._CountingModule",
                       "megakernel_gym.rewards.inline.program.FastInlineModule")
INLINE_MODULES = tuple(f"megakernel_gym.rewards.inline.{m}" for m in (
    "headers", "subset", "preprocess", "parse", "values", "program", "check", "interpret", "front"))
KERNEL_LIKE_MODULES = ("megakernel_gym.cuda.nvrtc", "megakernel_gym.rewards.sandbox") + INLINE_MODULES


def _is_kernel_like(v, guard: Guard) -> bool:
    return isinstance(v, guard._kernel_types) or type(v).__module__ in KERNEL_LIKE_MODULES


def _defined_outside(cls: type, name: str, own: set[type]) -> bool:
    """Whether `name` resolves, on cls, to something defined by a class that is not the candidate's."""
    for c in cls.__mro__:
        if name in vars(c):
            return c not in own
    return True


def _nn_layer(nn, name: str) -> bool:
    v = getattr(nn, name, None)
    return isinstance(v, type) and issubclass(v, nn.Module)


def _own_value(value, module: str) -> bool:
    """Whether a module's public value is its package's own (a function, class or object defined in it, or a
    plain number or string), not something it imported from elsewhere."""
    if isinstance(value, (int, float, complex, bool, str, type(None))):
        return True
    home = getattr(value, "__module__", None) if callable(value) else type(value).__module__
    package = module.split(".")[0]
    if not (isinstance(home, str) and (home == package or home.startswith(package + "."))):
        return False
    if package == "triton" and isinstance(value, types.FunctionType) and not getattr(value, "__triton_builtin__", False):
        # a plain Python helper of Triton's, not a kernel builtin: red team 10's tl.str_to_ty ran the candidate's
        # string through eval() with the real builtins. Only libdevice's device functions (stubs the compiler
        # resolves, named in kernels) are plain functions a candidate may hold, and, on the cpu backend, the
        # interpreter's stand-ins for the builtins while a kernel body runs (tl.where in a kernel there)
        return home.endswith("libdevice") or home == "triton.runtime.interpreter"
    return True


def _native_hasattr(obj, name: str) -> bool:
    """hasattr without running a property's code more than Python's own would (it does run it)."""
    try:
        return hasattr(obj, name)
    except Exception:  # noqa: BLE001 - an object's own __getattr__ raising something else
        return False


def _describe(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__} object".replace("builtins.", "")


def load_candidate(source: str, module_name: str, path: str, guard: Guard) -> types.ModuleType:
    """Compile and run the candidate's module under the guard. The source is also written to `path`
    (Triton reads a @triton.jit function's source back from its file). Raises SyntaxError for what
    the policy refuses at compile time, GuardError for what it refuses while the module runs."""
    import sys
    with open(path, "w", encoding="utf-8") as f:   # the text the rules read (see triton_cpu.interpret_own_source)
        f.write(source)
    code = compile_candidate(source, path)
    mod = types.ModuleType(module_name)
    mod.__file__ = path
    ns = guard.namespace(module_name)
    mod.__dict__.update(ns)
    sys.modules[module_name] = mod   # Triton's jit finds its function's module here
    guard.phase = "import"
    exec(code, mod.__dict__)
    return mod


__all__ = ["Guard", "GuardError", "compile_candidate", "load_candidate", "CandidatePolicy"]
