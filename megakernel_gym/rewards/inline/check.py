"""HostCheck: every host function read before anything runs, refusing what the interpreter does not
allow (calls outside the allowlist, writes to namespace-scope state, aliasing references, threads,
assembly, extern), with the hints its messages give.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable


from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards.inline.preprocess import TopFunction, _match_brace
from megakernel_gym.rewards.inline.subset import DISPATCH_MACROS, GUARDS, LIBRARY_CALLS, MEMBERS, Unsupported
from megakernel_gym.rewards.inline.values import Kernel, Num, _CNAME, _CTYPE_NUM, _ELEMENT, _common, _promoted

if TYPE_CHECKING:        # a Program runs the check on itself
    from megakernel_gym.rewards.inline.program import Program


# ---------------------------------------------------------------------------------------
# what the host code may do: checked at load, before anything of it runs


def _namespaces_at(code: str, pos: int) -> list[str]:
    """The qualified names of the named namespaces around a position (`a::b`, then `b`'s own path...):
    a constant there is read as `a::b::NAME` too."""
    path = []
    for m in re.finditer(r"\bnamespace\s+([\w:]+)\s*\{", code[:pos]):
        if _match_brace(code, m.end() - 1) > pos:
            path.append(m.group(1))
    return ["::".join(path[i:]) for i in range(len(path))]


def _check_binding(body: str) -> None:
    """A PYBIND11_MODULE holds `m.def("name", &function, ...)` lines and nothing else: the interpreter
    never runs it, so anything more would be code the real extension runs and the fast path does not."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', body)
    for stmt in text.split(";"):
        if not stmt.strip():
            continue
        if not re.match(r"^\s*\w+\s*\.\s*def\s*\(", stmt):
            raise Unsupported(f"PYBIND11_MODULE does more than m.def(...): {' '.join(stmt.split())[:80]}")
        if "[" in stmt:
            raise Unsupported("a lambda bound in PYBIND11_MODULE (bind a host function by name)")


_CTOR_ATTRIBUTE = re.compile(r"__attribute__\s*\(\(\s*(?:__)?(?:constructor|destructor)|"
                             r"\[\[\s*gnu::(?:constructor|destructor)")
_DEVICE_WORDS = re.compile(r"__(?:global|device|shared|constant|managed)__")


def _namespace_scope(code: str, fns: list[TopFunction]) -> tuple[set[str], set[str]]:
    """Refuses what a source holds at namespace scope that would run, or be declared for host code to
    reach, outside the interpreter: constructor attributes, inline assembly, extern declarations. Returns
    the namespace-scope variables that are not const and the names declared const there."""
    if _CTOR_ATTRIBUTE.search(code):
        raise Unsupported("a constructor/destructor attribute: code that would run when the extension loads")
    text = code
    for f in sorted(fns, key=lambda f: -f.start):
        text = text[:f.start] + _blank(text[f.start:f.end]) + text[f.end:]
    # braces that hold code (bodies of functions the reader did not take, types' bodies), not namespaces
    bodies = []
    for m in re.finditer(r"\{", text):
        head = text[max(0, m.start() - 80):m.start()]
        if re.search(r'(?:\bnamespace(?:\s+[\w:]+)?|\bextern\s*"C")\s*$', head):
            continue
        if bodies and bodies[-1][0] < m.start() < bodies[-1][1]:
            continue
        bodies.append((m.start(), _match_brace(text, m.start())))
    inside = lambda p: any(a <= p < b for a, b in bodies)   # noqa: E731
    for m in re.finditer(r"\b(?:asm|__asm__|__asm)\b", text):
        if not inside(m.start()):
            raise Unsupported("inline assembly at namespace scope")
    flat = text
    for a, b in reversed(bodies):
        flat = flat[:a] + ";" + _blank(flat[a + 1:b - 1]) + ";" + flat[b:]
    flat = re.sub(r'(?:\bnamespace(?:\s+[\w:]+)?|\bextern\s*"C")\s*\{', ";", flat).replace("}", ";")
    variables, consts = set(), set()
    for stmt in flat.split(";"):
        words = " ".join(stmt.split())
        if not words or re.match(r"^(?:typedef|using|template|struct|class|union|enum|static_assert|namespace)\b",
                                 words):
            continue
        if re.match(r'^extern\b', words) and not _DEVICE_WORDS.search(words):
            raise Unsupported(f"the extern declaration `{words[:80]}` (host code calls only what the interpreter "
                              "allows, never a function declared to the linker)")
        if _DEVICE_WORDS.search(words):
            continue
        decl = re.match(r"^(?:(?:static|inline|const|constexpr|volatile|thread_local)\s+)*[\w:<>, ]+?[\s*&]+(\w+)\s*"
                        r"(=|\{|\[|;|$)", words)
        if decl is None:
            continue     # a prototype or something the device compiler judges
        if re.search(r"\b(?:const|constexpr)\b", words.split("=")[0]):
            consts.add(decl.group(1))
        else:
            variables.add(decl.group(1))
    return variables, consts


def _base(ctype: str) -> str:
    """A type without cv-qualifiers, references and extra spaces (pointers kept)."""
    t = re.sub(r"\b(?:const|volatile|constexpr|__restrict__|__restrict)\b", " ", ctype).replace("&", " ")
    t = re.sub(r"\s*::\s*", "::", " ".join(t.split()))
    return t.replace(" *", "*")


def _constant_expr(node, constants: dict) -> bool:
    """Whether an expression is a constant the compiler folds: literals, operators, casts, sizeof and
    namespace-scope constants. A static local or namespace-scope constant initialized otherwise would run
    its initializer once, natively, and keep the value: state the interpreter does not keep."""
    if not isinstance(node, tuple):
        return True
    kind = node[0]
    if kind in ("num", "sizeof"):
        return True
    if kind == "name":
        return node[1] in constants or node[1] in ("true", "false")
    if kind in ("bin", "unary", "ternary", "cast"):
        return all(_constant_expr(x, constants) for x in node[1:] if isinstance(x, tuple))
    if kind == "call" and node[1][0] == "name" and node[1][1] in ("static_cast",) and node[1][2]:
        return all(_constant_expr(x, constants) for x in node[2])
    return False


_COMPARISONS = ("==", "!=", "<", ">", "<=", ">=", "&&", "||")


def _static_type(e, lookup: Callable[[str], str | None]) -> str | None:
    """The scalar type of an expression where the text says it (a literal, a declared variable, a cast, a
    tensor's size), without evaluating anything; None where it does not. `lookup` gives a name's type."""
    kind = e[0]
    if kind == "num":
        return e[2]
    if kind == "name":
        return lookup(e[1])
    if kind == "cast":
        return _CTYPE_NUM.get(_base(e[1]))
    if kind == "sizeof":
        return "uint64"
    if kind == "unary":
        if e[1] == "!":
            return "bool"
        t = _static_type(e[2], lookup)
        return _promoted(t) if t else None
    if kind == "bin":
        if e[1] in _COMPARISONS:
            return "bool"
        a, b = _static_type(e[2], lookup), _static_type(e[3], lookup)
        if e[1] in ("<<", ">>"):
            return _promoted(a) if a else None
        return _common(a, b) if a and b else None
    if kind == "ternary":
        a, b = _static_type(e[2], lookup), _static_type(e[3], lookup)
        return (a if a == b else _common(a, b)) if a and b else None
    if kind in ("assign", "incr"):
        return _static_type(e[2], lookup)
    if kind == "comma":
        return _static_type(e[2], lookup)
    if kind == "member" and e[2] in ("x", "y", "z"):
        return "uint32"
    if kind == "call":
        fn = e[1]
        if fn[0] == "member":
            return {"size": "int64", "stride": "int64", "numel": "int64", "dim": "int64", "ndimension": "int64",
                    "element_size": "int64", "itemsize": "uint64"}.get(fn[2])
        if fn[0] == "name":
            short = fn[1].split("::")[-1]
            if short in ("static_cast", "reinterpret_cast", "const_cast") and fn[2]:
                return _CTYPE_NUM.get(_base(fn[2][1:-1]))
            if short in ("min", "max") and len(e[2]) == 2:
                if fn[2]:
                    return _CTYPE_NUM.get(_base(fn[2][1:-1]))
                a, b = (_static_type(x, lookup) for x in e[2])
                return a if a == b else None
    return None


# CUDA's host min/max overloads (crt/math_functions.hpp): one per pair of int, long, long long (either
# signedness) or float/double. Arguments of two of these families match more than one: nvcc refuses.
_MINMAX_FAMILY = {"int32": "int", "uint32": "int", "int64": "long", "uint64": "long", "llong": "llong",
                  "ullong": "llong", "float": "fp", "double": "fp"}


def minmax_type(program: "Program", name: str, targs: str | None, a: str, b: str, file: str) -> str:
    """The type std::min/max (or CUDA's unqualified min/max) return for arguments of types a and b, or
    nvcc's or g++'s error where the real build would find no function to call."""
    short = name.split("::")[-1]
    if targs:
        t = _CTYPE_NUM.get(_base(targs[1:-1]))
        if t is None:
            raise Unsupported(f"{name}{targs}")
        return t
    if "::" in name or file == "cpp":
        if "::" not in name and not program.using_std:
            program.compile_error(f'identifier "{short}" is undefined', f"\u2018{short}\u2019 was not declared in this "
                                  "scope", file)
        if a != b:
            program.compile_error(f'no instance of overloaded function "std::{short}" matches the argument list',
                                  f"no matching function for call to \u2018{short}({_CNAME[a]}, {_CNAME[b]})\u2019",
                                  file)
        return a
    fa, fb = _MINMAX_FAMILY.get(_promoted(a)), _MINMAX_FAMILY.get(_promoted(b))
    if fa != fb:
        program.compile_error(f'more than one instance of overloaded function "{short}" matches the argument list',
                              "", file)
    return _common(a, b)


_DTYPE_NAMES = {"kFloat": "float32", "kFloat32": "float32", "kDouble": "float64", "kFloat64": "float64",
                "kHalf": "float16", "kFloat16": "float16", "kBFloat16": "bfloat16", "kInt": "int32", "kInt32": "int32",
                "kLong": "int64", "kInt64": "int64", "kBool": "bool", "kByte": "uint8", "kUInt8": "uint8",
                "kChar": "int8", "kInt8": "int8", "kShort": "int16", "kInt16": "int16", "Float": "float32",
                "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32", "Long": "int64",
                "Bool": "bool"}
_NAMED_VALUES = {"cudaSuccess": (0, "int32"), "true": (1, "bool"), "false": (0, "bool"), "nullptr": (0, "int64"),
                 "NULL": (0, "int64")}


_NAMED_VALUES.update({"INFINITY": (float("inf"), "float"), "HUGE_VALF": (float("inf"), "float"),
                      "HUGE_VAL": (float("inf"), "double"), "NAN": (float("nan"), "float")})


def _is_constant_name(name: str) -> bool:
    """A name the interpreter knows the value of: true, nullptr, cudaSuccess, torch's dtypes and devices."""
    short = name.split("::")[-1]
    torchy = name.startswith(("torch::", "at::", "c10::"))
    return name in _NAMED_VALUES or name in ("stderr", "stdout") or short in _DTYPE_NAMES and torchy or \
        short in ("kCUDA", "kCPU") and (torchy or name == short)


@dataclass
class _Var:
    ctype: str
    const: bool = False
    ref: bool = False
    t: str | None = None      # its scalar type, where the declaration says it
    pointer: bool = False     # a pointer (never written through)


_TORCH_TYPES = {"Tensor", "TensorOptions", "IntArrayRef", "ScalarType", "Device", "Scalar", "CUDAStream"}
_HOST_TYPES = {"auto", "dim3", "cudaError_t", "cudaStream_t", "void", "scalar_t", "std::string"}


class HostCheck:
    """Reads every host function before any of it runs and refuses, naming the function and the construct,
    what the interpreter does not take: a call or member outside the allowlist (whatever namespace C++ would
    find it in), a name that is no local, constant or function of the source, a write to anything but a
    local variable (no state kept across calls), a static local, a reference aliasing a variable, a value of
    a type the interpreter does not model. Where nvcc or g++ refuse the code (assignment to a const, std::min
    of two types) the error is theirs. Being at load, the verdict holds on a machine without a GPU too."""

    def __init__(self, program: "Program"):
        self.p = program
        self.file = "cuda"

    def run(self) -> None:
        for cname, (ret, params, tree) in self.p.parsed.items():
            self.file = self.p.host_file.get(cname, "cuda")
            try:
                scope: dict[str, _Var] = {}
                for ctype, pname, quals in params:
                    self.type_ok(ctype)
                    scope[pname] = _Var(ctype, "const" in quals, "ref" in quals, _CTYPE_NUM.get(_base(ctype)),
                                        _base(ctype).endswith("*"))
                self.stmt(tree, [scope])
            except Unsupported as e:
                raise Unsupported(f"in {cname}(): {e.construct}") from None

    # -- scopes ----------------------------------------------------------------------------
    @staticmethod
    def local(name: str, scopes) -> _Var | None:
        for s in reversed(scopes):
            if name in s:
                return s[name]
        return None

    def lookup_type(self, scopes) -> Callable[[str], str | None]:
        def t(name):
            if name in ("true", "false"):
                return "bool"
            v = self.local(name, scopes)
            if v is not None:
                return v.t
            g = self.p.globals.get(name)
            return g.t if isinstance(g, Num) else None
        return t

    def type_ok(self, ctype: str) -> None:
        base = _base(ctype)
        if base.endswith("*") or base in _CTYPE_NUM or base in _HOST_TYPES or base in GUARDS:
            return
        short = base.split("::")[-1]
        if short in _TORCH_TYPES and (base == short or base.startswith(("torch::", "at::", "c10::"))):
            return
        m = re.match(r"^std::(vector|tuple|pair|array)<(.*)>$", base)
        if m:
            for inner in _split_targs(m.group(2)):
                if not re.fullmatch(r"\d+", inner.strip()):
                    self.type_ok(inner)
            return
        why = " (the source's types are device-side only)" if base in self.p.types else ""
        raise Unsupported(f"a host variable of type {base}{why}")

    # -- statements ------------------------------------------------------------------------
    def stmt(self, node, scopes) -> None:  # noqa: C901 - one dispatch over the statement kinds
        kind = node[0]
        if kind == "block":
            inner = scopes if len(node) > 2 else scopes + [{}]
            for st in node[1]:
                self.stmt(st, inner)
        elif kind == "decl":
            self.declaration(node, scopes)
        elif kind == "expr":
            self.expr(node[1], scopes)
        elif kind == "if":
            self.expr(node[1], scopes)
            self.stmt(node[2], scopes + [{}])
            if node[3] is not None:
                self.stmt(node[3], scopes + [{}])
        elif kind == "for":
            inner = scopes + [{}]
            self.stmt(node[1], inner)
            self.expr(node[2], inner)
            if node[3] is not None:
                self.expr(node[3], inner)
            self.stmt(node[4], inner + [{}])
        elif kind == "do":
            self.stmt(node[1], scopes + [{}])
            self.expr(node[2], scopes)
        elif kind in ("return", "throw"):
            if node[1] is not None:
                self.expr(node[1], scopes)
        elif kind in ("break", "continue"):
            pass
        elif kind == "switch":
            self.expr(node[1], scopes)
            for label, body in node[2]:
                if label is not None:
                    self.expr(label, scopes)
                for st in body:
                    self.stmt(st, scopes + [{}])
        elif kind == "dispatch":
            _, macro, args = node
            if macro not in DISPATCH_MACROS:
                raise Unsupported(f"{macro} (the interpreter dispatches {', '.join(DISPATCH_MACROS)})")
            extra, dtype, name, body = dispatch_args(macro, args)
            for a in (*extra, dtype, name):
                self.expr(a, scopes)
            self.stmt(body[1], scopes + [{"scalar_t": _Var("type", True)}])
        else:
            raise Unsupported(f"the statement {kind}")

    def declaration(self, node, scopes) -> None:
        _, ctype, name, init, quals = node
        self.type_ok(ctype)
        inits = [] if init is None else [init[1]] if init[0] == "init" else list(init[1])
        for a in inits:
            self.expr(a, scopes)
        if "static" in quals and not ("const" in quals and all(_constant_expr(a, self.p.globals) for a in inits)):
            raise Unsupported(f"the static local {name} (a static local keeps its value across calls; host code "
                              "keeps no state)")
        if "ref" in quals and len(inits) == 1 and inits[0][0] == "name" and self.local(inits[0][1], scopes):
            raise Unsupported(f"the reference {name} to the variable {inits[0][1]} (the interpreter copies values "
                              "where C++ would alias them)")
        t = _CTYPE_NUM.get(_base(ctype))
        if t is None and _base(ctype) == "auto" and len(inits) == 1:
            t = _static_type(inits[0], self.lookup_type(scopes))
        pointer = _base(ctype).endswith("*") or _base(ctype) == "auto" and len(inits) == 1 and _pointerish(inits[0])
        scopes[-1][name] = _Var(ctype, "const" in quals, "ref" in quals, t, pointer)

    # -- expressions -----------------------------------------------------------------------
    def expr(self, e, scopes) -> None:  # noqa: C901 - one dispatch over the expression kinds
        kind = e[0]
        if kind in ("num", "str", "sizeof"):
            if kind == "sizeof":
                self.type_ok(e[1]) if not _base(e[1]).endswith("*") and _base(e[1]) not in _ELEMENT else None
            return
        if kind == "name":
            self.name(e[1], scopes)
        elif kind == "list":
            for x in e[1]:
                self.expr(x, scopes)
        elif kind == "bin":
            self.expr(e[2], scopes)
            self.expr(e[3], scopes)
        elif kind == "unary":
            self.expr(e[2], scopes)
        elif kind == "ternary":
            for x in e[1:]:
                self.expr(x, scopes)
        elif kind == "comma":
            self.expr(e[1], scopes)
            self.expr(e[2], scopes)
        elif kind == "cast":
            self.type_ok(e[1])
            self.expr(e[2], scopes)
        elif kind in ("assign", "incr"):
            self.target(e[2], scopes, e[1])
            if kind == "assign":
                self.expr(e[3], scopes)
        elif kind == "member":
            if e[2] not in ("x", "y", "z"):
                raise Unsupported(f"the member .{e[2]} read without a call (only dim3's x, y, z are)")
            self.expr(e[1], scopes)
        elif kind == "call":
            self.call(e, scopes)
        elif kind == "launch":
            _, kname, targs, config, args = e
            if self.file == "cpp":   # g++ builds cpp_sources: <<<>>> is nvcc's syntax
                self.p.compile_error("", "expected primary-expression before \u2018<\u2019 token", "cpp")
            if kname not in self.p.kernels:
                raise Unsupported(f"a launch of {kname}, which is not a __global__ function of the source")
            for x in config + args:
                self.expr(x, scopes)
        elif kind == "index":
            self.expr(e[1], scopes)
            self.expr(e[2], scopes)
        elif kind == "addr":
            inner = e[1]
            if not (inner[0] == "name" and inner[1] in self.p.kernels):
                raise Unsupported(f"taking an address ({_show(inner)}): pointers come from data_ptr and casts only")
        else:
            raise Unsupported(f"the expression {kind}")

    def name(self, name: str, scopes) -> None:
        if self.local(name, scopes) is not None or name in self.p.globals or name in self.p.kernels:
            return
        if _is_constant_name(name):
            return
        if name in self.p.hosts or name in self.p.template_hosts:
            raise Unsupported(f"the function {name} used as a value (function pointers are not taken)")
        if name in self.p.ns_vars:
            raise Unsupported(f"the namespace-scope variable {name}: host code reads only namespace-scope "
                              "const/constexpr scalars (it keeps no state across calls)")
        if name in self.p.const_names:
            raise Unsupported(f"the namespace-scope constant {name}, whose value is not a constant expression of "
                              "scalars")
        raise Unsupported(f"the name {name}{_hint(name, call=False)}")

    def target(self, t, scopes, op: str) -> None:
        """What an assignment or ++/-- writes: a local variable of the function, never anything else."""
        gpp_verb = {"++": "increment", "--": "decrement"}.get(op, "assignment")
        if t[0] == "name":
            name = t[1]
            v = self.local(name, scopes)
            if v is None:
                if name in self.p.const_names:
                    self.p.compile_error("expression must be a modifiable lvalue",
                                         f"{gpp_verb} of read-only variable \u2018{name}\u2019", self.file)
                if name in self.p.ns_vars:
                    raise Unsupported(f"a write to the namespace-scope variable {name} (host code keeps no state "
                                      "across calls)")
                raise Unsupported(f"a write to {name}, which is not a local variable of the function")
            if v.const:
                kind = "reference" if v.ref else "parameter" if self._is_param(name, scopes) else "variable"
                scalar = v.t is not None or _base(v.ctype) in ("dim3",) or _base(v.ctype).endswith("*")
                if scalar or op != "=":
                    self.p.compile_error("expression must be a modifiable lvalue",
                                         f"{gpp_verb} of read-only {kind} \u2018{name}\u2019", self.file)
                self.p.compile_error('no operator "=" matches these operands',
                                     "passing \u2018const at::Tensor\u2019 as \u2018this\u2019 argument discards "
                                     "qualifiers", self.file)
            if v.ref:
                raise Unsupported(f"a write through the reference {name} (the interpreter copies values where C++ "
                                  "would write the referenced object)")
            if op in ("++", "--") and v.t == "bool":
                _bool_step(self.p, op)
            return
        if t[0] == "member" and t[1][0] == "name" and t[2] in ("x", "y", "z"):
            v = self.local(t[1][1], scopes)
            if v is None:
                raise Unsupported(f"a write to {t[1][1]}.{t[2]}, which is not a local variable of the function")
            if v.const:
                self.p.compile_error("expression must be a modifiable lvalue",
                                     f"assignment of member \u2018dim3::{t[2]}\u2019 in read-only object", self.file)
            return
        if t[0] == "index" and t[1][0] == "name":
            v = self.local(t[1][1], scopes)
            if v is None or v.ref or v.const or v.pointer:
                raise Unsupported(f"a write to {t[1][1]}[...], which is not a local std::vector of the function")
            self.expr(t[2], scopes)
            return
        raise Unsupported(f"a write to {_show(t)} (host code writes local variables only; pointers are never "
                          "dereferenced)")

    @staticmethod
    def _is_param(name: str, scopes) -> bool:
        return name in scopes[0] and not any(name in s for s in scopes[1:])

    def call(self, e, scopes) -> None:
        fn, args = e[1], e[2]
        for a in args:
            self.expr(a, scopes)
        if fn[0] == "member":
            if fn[2] not in MEMBERS:
                raise Unsupported(f"the method .{fn[2]}(){_hint(fn[2], member=True)}")
            self.expr(fn[1], scopes)
            return
        if fn[0] != "name":
            raise Unsupported(f"a call of {_show(fn)} (function pointers are not taken)")
        name, targs = fn[1], fn[2]
        short = name.split("::")[-1]
        if self.local(name, scopes) is not None:
            raise Unsupported(f"a call of the variable {name} (function pointers are not taken)")
        if name in self.p.parsed:
            want = len(self.p.parsed[name][1])
            if len(args) != want:
                self.p.compile_error(f"too {'few' if len(args) < want else 'many'} arguments in function call",
                                     f"too {'few' if len(args) < want else 'many'} arguments to function", self.file)
            return
        if name in LIBRARY_CALLS:
            if short in ("min", "max") and len(args) == 2:
                types = [_static_type(a, self.lookup_type(scopes)) for a in args]
                if all(types) or targs or "::" not in name and self.file == "cpp":
                    minmax_type(self.p, name, targs, types[0] or "int32", types[1] or "int32", self.file)
            return
        if name in self.p.kernels:
            self.p.compile_error("a __global__ function call must be configured", "", self.file)
        if name in self.p.template_hosts:
            raise Unsupported(f"a call to the template host function {name} (the interpreter runs non-template "
                              "host functions)")
        raise Unsupported(f"a call to {name}{_hint(name)}")


def _bool_step(program: "Program", op: str) -> None:
    """++/-- on a bool: C++17 removed them. nvcc's front end only warns (deprecated), then g++ refuses the
    code it generates, so a .cu source fails as a .cpp one does, in g++'s words."""
    msg = f"use of an operand of type \u2018bool\u2019 in \u2018operator{op}\u2019 is forbidden in C++17"
    program.compile_error(msg, msg)


def _pointerish(e) -> bool:
    """An initializer that gives a pointer: data_ptr, a pointer cast, pointer arithmetic on one."""
    if e[0] == "cast":
        return _base(e[1]).endswith("*")
    if e[0] == "call" and e[1][0] == "member":
        return e[1][2] in ("data_ptr", "mutable_data_ptr", "const_data_ptr")
    if e[0] == "call" and e[1][0] == "name" and e[1][2]:
        return e[1][2].endswith("*>")
    if e[0] == "bin" and e[1] in ("+", "-"):
        return _pointerish(e[2])
    return False


def _split_targs(text: str) -> list[str]:
    out, cur, depth = [], "", 0
    for c in text:
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += c == "<"
        depth -= c == ">"
        cur += c
    return out + [cur] if cur.strip() else out


def _show(node) -> str:
    if node[0] == "name":
        return node[1]
    if node[0] == "member":
        return f"{_show(node[1])}.{node[2]}"
    if node[0] == "index":
        return f"{_show(node[1])}[...]"
    if node[0] == "addr":
        return f"&{_show(node[1])}"
    return f"an expression ({node[0]})"


def _hint(name: str, member: bool = False, call: bool = True) -> str:
    """Why a name the interpreter does not know is refused."""
    low = name.lower()
    if member:
        return " (tensor compute runs in the candidate's kernels; the interpreter takes the methods listed below)"
    if re.search(r"cublas|cudnn|cutlass|cute::|cusparse|cufft|curand|nccl", low):
        return " (a CUDA library: the compute must be the candidate's own kernels)"
    if re.search(r"thread|pthread|async|fork|system|popen|exec|dlopen|fopen|mmap", low):
        return " (threads and system calls are never the host code's business)"
    if name.startswith(("at::", "torch::", "c10::")):
        return " (an ATen/torch call outside the allowlist: compute runs in the candidate's kernels)"
    if "::" not in name and call:
        return (" (not a function of the source: C++ would look it up in the headers and, for a tensor argument, "
                "in at:: by argument-dependent lookup, e.g. at::" + name + "; the interpreter calls only what it "
                "lists)")
    if not call:
        return " (not a local, a parameter, a namespace-scope constant or a name the interpreter knows)"
    return ""


# the scalar types a dispatch macro takes before its (type, "name", lambda), as PyTorch's Dispatch.h defines them:
# AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "name", [&] {...})
_DISPATCH_EXTRA = {"AT_DISPATCH_FLOATING_TYPES_AND2": 2}
_DISPATCH_CTYPES = {"float32": "float", "float64": "double", "float16": "at::Half", "bfloat16": "at::BFloat16"}


def dispatch_args(macro: str, args: list) -> tuple[list, Any, Any, tuple]:
    """(extra scalar types, the dispatched type, the name, the lambda) of an AT_DISPATCH macro's arguments."""
    n = _DISPATCH_EXTRA.get(macro, 0)
    if len(args) != n + 3 or args[-1][0] != "lambda":
        form = "at::kHalf, at::kBFloat16, " if n == 2 else ""
        raise Unsupported(f"{macro} not of the form {macro}({form}type, \"name\", [&] {{...}})")
    return args[:n], args[n], args[n + 1], args[n + 2]


def _dispatch_types(macro: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The C types a dispatch macro instantiates its lambda for: float and double, half for _AND_HALF, and the
    scalar types an _AND2 names (torch dtype names: float16, bfloat16)."""
    types = ["float", "double"]
    if "HALF" in macro:
        types.append("at::Half")
    types += [_DISPATCH_CTYPES[t] for t in extra if t in _DISPATCH_CTYPES]
    if "INTEGRAL" in macro or macro == "AT_DISPATCH_ALL_TYPES":
        raise Unsupported(f"{macro}")
    return types


def _blank(text: str) -> str:
    return "".join(c if c == "\n" else " " for c in text)


_TEMPLATE_HEAD = re.compile(r"template\s*<([^{};]*)>")


def _kernel_of(f: TopFunction) -> Kernel:
    tm = _TEMPLATE_HEAD.search(f.head)
    template = []
    if tm:
        for part in tm.group(1).split(","):
            words = part.split("=")[0].split()
            if not words:
                continue
            template.append(("typename" if words[0] in ("typename", "class") else "value", words[-1]))
    sig = nvrtc.parse_signatures(f"__global__ void {f.name}({f.params})").get(f.name, [])
    return Kernel(f.name, template, sig)
