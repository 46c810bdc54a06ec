"""The interpreter: host functions run with C++'s integer semantics, torch's calls mapped to the same
ATen ops, and <<<...>>> launches through CuPy on the stream a real launch would use.
"""
from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards.inline.check import _DTYPE_NAMES, _NAMED_VALUES, _base, _bool_step, _DISPATCH_CTYPES, _dispatch_types, dispatch_args, _hint, _is_constant_name, _static_type, minmax_type
from megakernel_gym.rewards.inline.preprocess import tokenize
from megakernel_gym.rewards.inline.subset import BuildError, CudaRuntimeError, FACTORIES, GUARDS, LIBRARY_CALLS, Unsupported
from megakernel_gym.rewards.inline.values import Dim3, Num, Options, Ptr, Stream, _Break, _CNAME, _CTYPE_NUM, _CUDA_ERRORS, _Continue, _ELEMENT, _INT_TYPES, _Iter, _Return, _common, _copy, _dim3, _fit, _promoted, _scalar

if TYPE_CHECKING:        # a Program makes Interpreters; an Interpreter runs in one
    from megakernel_gym.rewards.inline.program import Program


# ---------------------------------------------------------------------------------------
# the interpreter


class HostFunction:
    """One exported host function, callable from Python as pybind11 would bind it."""

    def __init__(self, program: Program, cname: str, pyname: str):
        self.program, self.cname, self.__name__ = program, cname, pyname

    def __call__(self, *args):
        if not self.program.gpu and self.program.launcher is None:
            raise nvrtc.CudaUnavailableError(
                f"{self.program.name}: the load_inline extension's device code compiled with NVRTC and its "
                f"host code was read, but there is no CUDA GPU here to run {self.__name__}(); running a "
                "load_inline candidate needs the gpu backend (--backend gpu)")
        try:
            return Interpreter(self.program).call(self.cname, list(args), from_python=True)
        except Unsupported as e:
            # what the check at load could not see (a value's type, a dispatch on half): refused, never
            # built natively; a kernel launched before wrote only this call's outputs
            raise e.named(self.program.name) from None


class Interpreter:
    def __init__(self, program: Program):
        self.p = program
        self.file = "cuda"
        import torch
        self.torch = torch

    # -- calls ---------------------------------------------------------------------------
    def call(self, cname: str, args: list, from_python: bool = False):
        ret, params, tree = self.p.parsed[cname]
        if len(args) != len(params):
            raise TypeError(f"{cname}(): incompatible function arguments: takes {len(params)}, got {len(args)}")
        scope: dict[str, Any] = {}
        for (ctype, pname, quals), a in zip(params, args):
            scope[pname] = self._bind(ctype, a, from_python, cname, pname, "ref" in quals)
        if from_python:
            self.p.last_error = 0
        caller, self.file = self.file, self.p.host_file.get(cname, "cuda")
        try:
            # namespace-scope constants are read-only: no call leaves anything behind for the next one
            self.run(tree, [MappingProxyType(self.p.globals), scope, {}])
            value = None
        except _Return as r:
            value = r.value
        finally:
            self.file = caller
        num = _CTYPE_NUM.get(_base(ret))
        if num and isinstance(value, Num):
            value = Num(value.v, num)        # the function's return type, as C++ converts it
        if from_python and self.p.last_error:
            # a failed launch nobody read with cudaGetLastError stays CUDA's pending error, and torch's
            # check after its next kernel raises it: in the real extension, right after this call
            err, self.p.last_error = self.p.last_error, 0
            raise CudaRuntimeError(f"CUDA error: {_CUDA_ERRORS.get(err, err)} (a launch in {cname} failed "
                                   "and its error was not checked; torch's next kernel launch reports it)")
        return self._out(ret, value) if from_python else value

    def _bind(self, ctype: str, a, from_python: bool, fn: str, pname: str, ref: bool = False):
        torch = self.torch
        base = _base(ctype)
        if base in ("torch::Tensor", "at::Tensor", "Tensor"):
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{fn}(): incompatible function arguments: {pname} must be a Tensor, got "
                                f"{type(a).__name__}")
            return a
        num = _CTYPE_NUM.get(base)
        if num:
            if isinstance(a, Num):
                return Num(a.v, num)
            if from_python:
                bad = f"{fn}(): incompatible function arguments: {pname} must be "
                if num in ("float", "double"):
                    if not isinstance(a, (int, float)):
                        raise TypeError(bad + "a float")
                elif num == "bool":
                    if not isinstance(a, (bool, int)):
                        raise TypeError(bad + "a bool")
                else:
                    if not isinstance(a, int):   # a bool is an int to pybind11 (True -> 1), a float is not
                        raise TypeError(bad + f"an int, got {type(a).__name__}")
                    bits, signed = _INT_TYPES[num]
                    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
                    if not lo <= a < hi:     # pybind11 refuses an int its C type cannot hold
                        raise TypeError(bad + f"a {_CNAME[num]}, and {a} is out of its range")
            return Num(a, num)
        inner = base[12:-1].strip() if base.startswith("std::vector<") else ""
        if inner in _CTYPE_NUM:
            # numbers only: a tensor where std::vector<double> goes was read element by element on the host, one
            # item() each (red team 16 computed softmax there and wrote it back with fill_)
            if not isinstance(a, (list, tuple)) or any(not isinstance(x, (Num, int, float)) for x in a):
                raise Unsupported(f"{fn}(): {pname} is a {ctype}: pass a list of Python numbers, not tensors "
                                  "(their values would be read on the host)")
            return [Num(x.v if isinstance(x, Num) else x, _CTYPE_NUM[inner]) for x in a]
        if inner in ("torch::Tensor", "at::Tensor", "Tensor"):
            if not (isinstance(a, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in a)):
                raise TypeError(f"{fn}(): incompatible function arguments: {pname} must be a list of Tensors")
            return list(a)
        if from_python:
            raise Unsupported(f"the parameter type {ctype} of {fn}")
        return a if ref else _copy(a)

    def _out(self, ret: str, v):
        torch = self.torch
        if isinstance(v, Num):
            return v.v if v.t not in ("bool",) else bool(v.v)
        if isinstance(v, (list, tuple)):
            seq = [self._out("", x) for x in v]
            return tuple(seq) if "tuple" in ret else seq
        if v is None or isinstance(v, torch.Tensor):
            return v
        raise Unsupported(f"a return value of type {type(v).__name__}")

    # -- statements ----------------------------------------------------------------------
    def run(self, node: tuple, scopes: list[dict]) -> None:
        kind = node[0]
        if kind == "block":
            inner = scopes if len(node) > 2 else scopes + [{}]
            for s in node[1]:
                self.run(s, inner)
        elif kind == "decl":
            _, ctype, name, init, _quals = node
            scopes[-1][name] = self.declare(self._resolve(ctype, scopes), init, scopes)
        elif kind == "expr":
            self.eval(node[1], scopes)
        elif kind == "if":
            if self.truth(self.eval(node[1], scopes)):
                self.run(node[2], scopes + [{}])
            elif node[3] is not None:
                self.run(node[3], scopes + [{}])
        elif kind == "for":
            inner = scopes + [{}]
            self.run(node[1], inner)
            steps = 0
            while self.truth(self.eval(node[2], inner)):
                steps += 1
                if steps > 1_000_000:
                    raise Unsupported("a host loop of over a million steps")
                try:
                    self.run(node[4], inner + [{}])
                except _Break:
                    break
                except _Continue:
                    pass
                if node[3] is not None:
                    self.eval(node[3], inner)
        elif kind == "do":
            steps = 0
            while True:
                steps += 1
                if steps > 1_000_000:
                    raise Unsupported("a host loop of over a million steps")
                try:
                    self.run(node[1], scopes + [{}])
                except _Break:
                    break
                except _Continue:
                    pass
                if not self.truth(self.eval(node[2], scopes)):
                    break
        elif kind == "return":
            raise _Return(None if node[1] is None else self.eval(node[1], scopes))
        elif kind == "break":
            raise _Break()
        elif kind == "continue":
            raise _Continue()
        elif kind == "throw":
            v = self.eval(node[1], scopes)
            raise RuntimeError(v if isinstance(v, str) else "exception thrown by the extension")
        elif kind == "dispatch":
            self.dispatch(node, scopes)
        elif kind == "switch":
            value = self.eval(node[1], scopes)
            labels = [None if lab is None else self.eval(lab, scopes) for lab, _ in node[2]]
            start = next((i for i, lab in enumerate(labels) if lab is not None and self.truth(
                self.binop_values("==", value, lab))), None)
            if start is None:
                start = next((i for i, lab in enumerate(labels) if lab is None), None)
            if start is not None:
                try:
                    for _, body in node[2][start:]:
                        for st in body:
                            self.run(st, scopes + [{}])
                except _Break:
                    pass
        else:
            raise Unsupported(f"statement {kind}")

    def dispatch(self, node: tuple, scopes: list[dict]) -> None:
        _, macro, args = node
        torch = self.torch
        extra, dtype, name, body = dispatch_args(macro, args)
        st = self.eval(dtype, scopes)
        if isinstance(st, torch.Tensor):
            st = st.dtype
        dtype_name = lambda d: str(d).replace("torch.", "") if isinstance(d, torch.dtype) else None  # noqa: E731
        ctype = _DISPATCH_CTYPES.get(dtype_name(st))
        named = tuple(dtype_name(self.eval(a, scopes)) for a in extra)
        if ctype not in _dispatch_types(macro, named):
            raise RuntimeError(f"\"{self.eval(name, scopes)}\" not implemented for '{_dtype_name(st)}'")
        if ctype not in ("float", "double"):
            raise Unsupported(f"{macro} on {ctype}")
        self.run(body[1], scopes + [{"scalar_t": ("type", ctype)}])

    def declare(self, ctype: str, init, scopes):
        base = _base(ctype)
        vals = None if init is None else [self.eval(init[1], scopes)] if init[0] == "init" else \
            [self.eval(a, scopes) for a in init[1]]
        if base == "dim3":
            if not vals:
                return Dim3()
            if len(vals) == 1 and isinstance(vals[0], Dim3):
                return _copy(vals[0])
            return _dim3(vals)
        if base.startswith("std::vector<"):
            inner = _CTYPE_NUM.get(_base(base[12:-1]))
            elem = (lambda v: Num(v.v, inner) if isinstance(v, Num) else v) if inner else (lambda v: v)  # noqa: E731
            if not vals:
                return []
            if init[0] == "init":
                v = vals[0]
                return [elem(x) for x in v] if isinstance(v, (list, tuple)) else v
            if len(vals) == 2 and all(isinstance(v, _Iter) for v in vals) and vals[0].seq == vals[1].seq:
                return [elem(x) for x in vals[0].seq[vals[0].at:vals[1].at]]
            if init[0] == "ctor" and len(vals) in (1, 2) and isinstance(vals[0], Num):   # (count[, value])
                return [elem(vals[1]) if len(vals) == 2 else Num(0, inner or "int64")] * vals[0].v
            return [elem(v) for v in vals]
        if vals is None:
            num = _CTYPE_NUM.get(base)
            return Num(0, num) if num else None
        if init[0] != "init":
            if base in GUARDS:
                return None      # one device, the current one: a guard changes nothing here
            if len(vals) != 1:
                raise Unsupported(f"a constructor of {ctype} with {len(vals)} arguments")
        return self.convert(base, _copy(vals[0]))

    def convert(self, ctype: str, value):
        ctype = ctype.replace("&", "").replace("const", "").strip()
        if ctype == "auto" or ctype.startswith(("torch::", "at::", "c10::", "std::", "cuda")) \
                and not ctype.endswith("*") or ctype in ("Tensor",):
            if ctype == "cudaError_t" and isinstance(value, Num):
                return value
            return value
        if ctype.endswith("*"):
            if isinstance(value, Ptr):
                return Ptr(value.addr, ctype[:-1].strip())
            if isinstance(value, Num) and value.v == 0:
                return Ptr(0, ctype[:-1].strip())
            raise Unsupported(f"pointer {ctype} from {type(value).__name__}")
        num = _CTYPE_NUM.get(ctype)
        if num:
            if isinstance(value, Num):
                return Num(value.v, num)
            if isinstance(value, bool):
                return Num(int(value), num)
            raise Unsupported(f"{ctype} from {type(value).__name__}")
        if ctype in self.p.types or ctype in ("scalar_t",):
            raise Unsupported(f"a host value of type {ctype}")
        return value

    # -- expressions ---------------------------------------------------------------------
    def truth(self, v) -> bool:
        if isinstance(v, Num):
            return bool(v.v)
        if isinstance(v, Ptr):
            return v.addr != 0
        if isinstance(v, bool):
            return v
        raise Unsupported(f"truth of {type(v).__name__}")

    def lookup(self, name: str, scopes):
        for s in reversed(scopes):
            if name in s:
                return s, s[name]
        raise KeyError(name)

    def _writable(self, name: str, scopes):
        """A local variable's scope and value; a namespace-scope name is never written (HostCheck refuses it
        at load: this holds it however the host code got here)."""
        try:
            s, v = self.lookup(name, scopes)
        except KeyError:
            raise Unsupported(f"a write to {name}, which is not a local variable") from None
        if isinstance(s, MappingProxyType) or s is self.p.globals:
            raise Unsupported(f"a write to the namespace-scope {name} (host code keeps no state across calls)")
        return s, v

    def eval(self, e: tuple, scopes):  # noqa: C901 - one dispatch over the node kinds
        kind = e[0]
        if kind == "num":
            return Num(e[1], e[2])
        if kind == "str":
            return e[1]
        if kind == "name":
            return self.name(e[1], e[2], scopes)
        if kind == "list":
            return [self.eval(x, scopes) for x in e[1]]
        if kind == "bin":
            return self.binop(e[1], e[2], e[3], scopes)
        if kind == "unary":
            v = self.eval(e[2], scopes)
            if e[1] == "!":
                return Num(0 if self.truth(v) else 1, "bool")
            if not isinstance(v, Num):
                raise Unsupported(f"unary {e[1]} on {type(v).__name__}")
            if e[1] == "~" and v.t in ("float", "double"):
                self._type_error("~", v, None)
            t = _promoted(v.t)
            if e[1] == "-":
                return Num(-v.v, t)
            if e[1] == "~":
                return Num(~v.v, t)
            return Num(v.v, t)
        if kind == "ternary":
            pick = self.truth(self.eval(e[1], scopes))
            v = self.eval(e[2] if pick else e[3], scopes)
            other = _static_type(e[3] if pick else e[2], self._type_lookup(scopes))
            if isinstance(v, Num) and other and other != v.t:
                v = Num(v.v, _common(v.t, other))   # both operands convert to their common type, as in C++
            return v
        if kind == "assign":
            return self.assign(e, scopes)
        if kind == "incr":
            target = e[2]
            if target[0] != "name":
                raise Unsupported("++ on a non-variable")
            s, old = self._writable(target[1], scopes)
            if not isinstance(old, Num):
                raise Unsupported(f"{e[1]} on {type(old).__name__}")
            if old.t == "bool":
                _bool_step(self.p, e[1])
            new = self.arith("+" if e[1] == "++" else "-", old, Num(1, "int32"))
            s[target[1]] = Num(new.v, old.t)
            return s[target[1]] if e[3] else old
        if kind == "comma":
            self.eval(e[1], scopes)
            return self.eval(e[2], scopes)
        if kind == "cast":
            return self.cast(self._resolve(e[1], scopes), self.eval(e[2], scopes))
        if kind == "sizeof":
            size = _ELEMENT.get(self._resolve(e[1], scopes).replace("const", "").strip())
            if size is None:
                raise Unsupported(f"sizeof({e[1]})")
            return Num(size, "uint64")
        if kind == "member":
            return self.member(self.eval(e[1], scopes), e[2], e[3], None, scopes)
        if kind == "call":
            return self.call_expr(e, scopes)
        if kind == "launch":
            return self.launch(e, scopes)
        if kind == "index":
            base = self.eval(e[1], scopes)
            idx = self.eval(e[2], scopes)
            if isinstance(base, (list, tuple)) and isinstance(idx, Num):
                return base[idx.v]
            raise Unsupported("indexing")
        if kind == "addr":
            return self.eval(e[1], scopes)
        raise Unsupported(f"expression {kind}")

    def _type_lookup(self, scopes) -> Callable[[str], str | None]:
        def t(name):
            if name in ("true", "false"):
                return "bool"
            try:
                v = self.lookup(name, scopes)[1]
            except KeyError:
                return None
            return v.t if isinstance(v, Num) else None
        return t

    def name(self, name: str, targs, scopes):
        torch = self.torch
        try:
            return self.lookup(name, scopes)[1]
        except KeyError:
            pass
        if name in self.p.kernels:
            return ("kernel", name, targs)
        if name in _NAMED_VALUES:
            return Num(*_NAMED_VALUES[name])
        if name in ("stderr", "stdout"):
            return None
        short = name.split("::")[-1]
        if _is_constant_name(name):
            if short in ("kCUDA", "kCPU"):
                return torch.device("cuda" if short == "kCUDA" else "cpu")
            return getattr(torch, _DTYPE_NAMES[short])
        raise Unsupported(f"the name {name}{_hint(name, call=False)}")

    def cast(self, ctype: str, v):
        ctype = ctype.replace("const", "").strip()
        if ctype.endswith("*"):
            if isinstance(v, Ptr):
                return Ptr(v.addr, ctype[:-1].strip())
            if isinstance(v, Num):
                return Ptr(v.v, ctype[:-1].strip())
            raise Unsupported(f"cast to {ctype}")
        num = _CTYPE_NUM.get(ctype)
        if num and isinstance(v, Num):
            return Num(v.v, num)
        raise Unsupported(f"cast to {ctype}")

    def assign(self, e, scopes):
        _, op, target, value = e
        if target[0] == "member" and target[1][0] == "name" and target[2] in ("x", "y", "z"):
            d = self.eval(target[1], scopes)
            v = self.eval(value, scopes)
            if not isinstance(d, Dim3):
                raise Unsupported("member assignment")
            cur = Num(getattr(d, target[2]), "uint32")
            new = v if op == "=" else self.arith(op[:-1], cur, v)
            setattr(d, target[2], Num(new.v, "uint32").v)
            return new
        if target[0] == "index":
            seq, idx = self.eval(target[1], scopes), self.eval(target[2], scopes)
            if not (isinstance(seq, list) and isinstance(idx, Num)):
                raise Unsupported("indexed assignment")
            v = self.eval(value, scopes)
            if op != "=":
                v = self.arith(op[:-1], seq[idx.v], v)
            if isinstance(seq[idx.v], Num) and isinstance(v, Num):
                v = Num(v.v, seq[idx.v].t)
            seq[idx.v] = v
            return v
        if target[0] != "name":
            raise Unsupported("assignment to a non-variable")
        s, old = self._writable(target[1], scopes)
        v = _copy(self.eval(value, scopes))
        if op != "=":
            v = self.arith(op[:-1], old, v)
        if isinstance(old, Num) and isinstance(v, Num):
            v = Num(v.v, old.t)
        elif isinstance(old, Ptr) and isinstance(v, Ptr):
            v = Ptr(v.addr, old.ctype)
        s[target[1]] = v
        return v

    def binop(self, op, a_node, b_node, scopes):
        if op in ("&&", "||"):
            a = self.truth(self.eval(a_node, scopes))
            if op == "&&" and not a or op == "||" and a:
                return Num(int(a), "bool")
            return Num(int(self.truth(self.eval(b_node, scopes))), "bool")
        return self.binop_values(op, self.eval(a_node, scopes), self.eval(b_node, scopes))

    def binop_values(self, op, a, b):
        torch = self.torch
        if op in ("==", "!=") and isinstance(a, list) and isinstance(b, list):
            same = len(a) == len(b) and all(isinstance(x, Num) and isinstance(y, Num) and x.v == y.v
                                            for x, y in zip(a, b))
            return Num(int(same == (op == "==")), "bool")
        if op in ("==", "!=") and not (isinstance(a, Num) and isinstance(b, Num)):
            if isinstance(a, (torch.dtype, torch.device, str)) or isinstance(b, (torch.dtype, torch.device)):
                eq = a == b if not isinstance(a, torch.device) else a.type == getattr(b, "type", b)
                return Num(int(eq if op == "==" else not eq), "bool")
            if isinstance(a, Ptr) or isinstance(b, Ptr):
                aa = a.addr if isinstance(a, Ptr) else a.v
                bb = b.addr if isinstance(b, Ptr) else b.v
                return Num(int((aa == bb) == (op == "==")), "bool")
        if isinstance(a, _Iter) and isinstance(b, Num) and op in ("+", "-"):
            return _Iter(a.seq, a.at + (b.v if op == "+" else -b.v))
        if isinstance(a, Ptr) and isinstance(b, Num) and op in ("+", "-"):
            size = _ELEMENT.get(a.ctype)
            if size is None:
                raise Unsupported(f"pointer arithmetic on {a.ctype}*")
            return Ptr(a.addr + (b.v if op == "+" else -b.v) * size, a.ctype)
        if isinstance(a, Num) and isinstance(b, Num):
            return self.arith(op, a, b)
        raise Unsupported(f"{type(a).__name__} {op} {type(b).__name__}")

    def arith(self, op: str, a: Num, b: Num) -> Num:
        if op in ("%", "<<", ">>", "&", "|", "^") and {a.t, b.t} & {"float", "double"}:
            self._type_error(op, a, b)
        if op in ("<<", ">>"):
            t = _promoted(a.t)
            bits = _INT_TYPES[t][0]
            if not 0 <= b.v < bits:
                raise Unsupported(f"a shift by {b.v} of a {bits}-bit value (undefined in C++)")
            return Num(a.v << b.v if op == "<<" else a.v >> b.v, t)
        t = _common(a.t, b.t)
        x, y = _fit(a.v, t), _fit(b.v, t)
        if op in ("==", "!=", "<", ">", "<=", ">="):
            r = {"==": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]
            return Num(int(r), "bool")
        floating = t in ("float", "double")
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif op in ("/", "%"):
            if floating:
                if y != 0:
                    r = x / y
                elif x == 0 or x != x:
                    r = float("nan")
                else:
                    r = math.copysign(float("inf"), x) * math.copysign(1.0, y)
            else:
                if y == 0:
                    raise CudaRuntimeError("integer division by zero in the host code")
                if _INT_TYPES[t][1] and x == -(1 << (_INT_TYPES[t][0] - 1)) and y == -1:
                    raise CudaRuntimeError(f"integer overflow: {x} {op} -1 in the host code (a SIGFPE natively)")
                q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
                r = q if op == "/" else x - q * y
        elif op in ("&", "|", "^"):
            r = {"&": x & y, "|": x | y, "^": x ^ y}[op]
        else:
            raise Unsupported(f"operator {op} on {t}")
        return Num(r, t)

    def _type_error(self, op: str, a: Num, b: Num | None):
        """An operator C++ does not define on these types: nvcc's or g++'s error, as the real build gives it."""
        if b is None:
            self.p.compile_error("expression must have integral or unscoped enum type",
                                 "wrong type argument to bit-complement", self.file)
        self.p.compile_error("expression must have integral or unscoped enum type",
                             f"invalid operands of types \u2018{_CNAME[a.t]}\u2019 and \u2018{_CNAME[b.t]}\u2019 to "
                             f"binary \u2018operator{op}\u2019", self.file)

    # -- calls and members ---------------------------------------------------------------
    def call_expr(self, e, scopes):
        fn = e[1]
        args_nodes = e[2]
        if fn[0] == "member":
            obj = self.eval(fn[1], scopes)
            return self.member(obj, fn[2], fn[3], [self.eval(a, scopes) for a in args_nodes], scopes)
        if fn[0] != "name":
            raise Unsupported("call of an expression")
        name, targs = fn[1], fn[2]
        short = name.split("::")[-1]
        if name in ("TORCH_CHECK", "AT_ASSERTM", "TORCH_INTERNAL_ASSERT", "assert"):
            if not self.truth(self.eval(args_nodes[0], scopes)):
                msg = "".join(str(self._text(self.eval(a, scopes))) for a in args_nodes[1:])
                raise RuntimeError(msg or f"Expected {name} to hold")
            return None
        args = [self.eval(a, scopes) for a in args_nodes]
        self._scopes = scopes
        if name in self.p.parsed:
            return self.call(name, args)
        return self.builtin(name, short, targs, args)

    def _dtype_arg(self, v):     # a TensorOptions' dtype: C++ takes a dtype there and nothing else
        if isinstance(v, self.torch.dtype):
            return v
        raise Unsupported(f"a {type(v).__name__} as a TensorOptions dtype: give a dtype (torch::kFloat32)")

    def _text(self, v) -> str:
        if isinstance(v, Num):
            return str(v.v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self._text(x) for x in v) + "]"
        if isinstance(v, (str, bool, int, float, self.torch.dtype, self.torch.device)):
            return str(v)
        # anything else may hold a tensor, whose text is its values read on the host (red team 11: std::to_string(x);
        # red team 16: a vector's iterator, a TensorOptions whose dtype was a tensor)
        what = "a tensor" if isinstance(v, self.torch.Tensor) else f"a {type(v).__name__}"
        raise Unsupported(f"{what} as text (std::to_string, a check's message): only numbers, strings, dtypes and "
                          "devices are written out on the host")

    def builtin(self, name: str, short: str, targs, args):  # noqa: C901 - the C++ library subset
        torch = self.torch
        if name not in LIBRARY_CALLS:
            raise Unsupported(f"a call to {name}{_hint(name)}")
        if short in ("min", "max") and len(args) == 2 and all(isinstance(a, Num) for a in args):
            a, b = args
            t = minmax_type(self.p, name, targs, a.t, b.t, self.file)
            a, b = Num(a.v, t), Num(b.v, t)
            return b if (self.arith("<", b, a) if short == "min" else self.arith("<", a, b)).v else a
        if short in ("fmin", "fmax", "fminf", "fmaxf") and len(args) == 2 and all(isinstance(a, Num) for a in args):
            t = "float" if short.endswith("f") or {args[0].t, args[1].t} == {"float"} else "double"
            a, b = (Num(x.v, t) for x in args)
            if a.v != a.v or b.v != b.v:
                return b if a.v != a.v else a       # fmin/fmax ignore a NaN
            return Num((min if short.startswith("fmin") else max)(a.v, b.v), t)
        if short in ("ceil", "floor", "sqrt", "ceilf", "floorf", "sqrtf", "log2", "abs", "fabs", "fabsf") and \
                len(args) == 1 and isinstance(args[0], Num):
            v = args[0]
            f = {"ceil": math.ceil, "floor": math.floor, "sqrt": math.sqrt, "log2": math.log2, "abs": abs,
                 "fabs": abs}[short.rstrip("f") if short != "fabs" else short]
            if short == "abs" and v.t not in ("float", "double"):
                return Num(abs(v.v), _promoted(v.t))
            t = "float" if short.endswith("f") and short != "fabs" or v.t == "float" else "double"
            x = float(v.v)
            if x != x or x in (float("inf"), float("-inf")) and short.rstrip("f") in ("ceil", "floor"):
                return Num(x, t)
            if short.startswith(("sqrt", "log2")) and x <= 0:
                return Num(float("-inf") if x == 0 and short == "log2" else 0.0 if x == 0 else float("nan"), t)
            return Num(f(x), t)
        if name in ("cudaGetLastError", "cudaPeekAtLastError"):
            err = self.p.last_error
            if name == "cudaGetLastError":
                self.p.last_error = 0
            return Num(err, "int32")
        if name == "cudaGetErrorString":
            return _CUDA_ERRORS.get(args[0].v, f"CUDA error {args[0].v}")
        if name in ("cudaDeviceSynchronize", "cudaStreamSynchronize"):
            torch.cuda.synchronize()
            return Num(0, "int32")
        if name in ("C10_CUDA_KERNEL_LAUNCH_CHECK", "C10_CUDA_CHECK", "AT_CUDA_CHECK", "CUDA_CHECK"):
            err = args[0].v if args else self.p.last_error
            if not args:
                self.p.last_error = 0
            if err:
                raise CudaRuntimeError(f"CUDA error: {_CUDA_ERRORS.get(err, err)}")
            return None
        if name == "cudaFuncSetAttribute":
            k = args[0]
            if not (isinstance(k, tuple) and k[0] == "kernel"):
                raise Unsupported("cudaFuncSetAttribute on a non-kernel")
            self.p.cuda_module.set_max_dynamic_smem(self.p.lowered[self.p.name_expression(k[1], k[2], None, {})],
                                                    int(args[2].v))
            return Num(0, "int32")
        if name in ("printf", "fprintf"):
            return Num(0, "int32")
        if name in ("at::cuda::getCurrentCUDAStream", "c10::cuda::getCurrentCUDAStream",
                    "at::cuda::getDefaultCUDAStream"):
            return Stream(None if "Current" in name else 0)
        if name == "dim3":
            return _dim3(args)
        if short in FACTORIES and "::" in name:
            return self.factory(short, args)
        if short in ("TensorOptions", "dtype", "device") and "::" in name:
            opt = Options()
            if short == "dtype":
                opt.dtype = self._dtype_arg(args[0])
            elif short == "device":
                opt.device = self._device(args[0])
            return opt
        if name in ("std::vector", "std::make_tuple", "std::tuple", "std::make_pair"):
            return list(args)
        if name in ("std::runtime_error", "std::invalid_argument", "c10::Error"):
            return args[0] if args else "error"
        if short in ("to_string",):
            return self._text(args[0])
        if name in ("static_cast", "reinterpret_cast", "const_cast") and targs:
            return self.cast(self._resolve(targs[1:-1].strip(), self._scopes), args[0])
        raise Unsupported(f"{name} with these arguments")

    def _resolve(self, ctype: str, scopes) -> str:
        """scalar_t, inside AT_DISPATCH, is the dispatched C type."""
        if "scalar_t" in ctype:
            st = self._scalar_t(scopes)
            if st is None:
                raise Unsupported("scalar_t outside AT_DISPATCH")
            ctype = re.sub(r"\bscalar_t\b", st, ctype)
        return ctype

    def _scalar_t(self, scopes) -> str | None:
        for s in reversed(scopes):
            if "scalar_t" in s:
                return s["scalar_t"][1]
        return None

    def _device(self, d):
        torch = self.torch
        if isinstance(d, torch.device):
            return d
        if isinstance(d, str):
            return torch.device(d)
        raise Unsupported("device value")

    def _sizes(self, v) -> list[int]:
        if isinstance(v, Num):
            return [v.v]
        if isinstance(v, (list, tuple)):
            out = []
            for x in v:
                if not isinstance(x, Num):
                    raise Unsupported("a size that is not an integer")
                out.append(Num(x.v, "int64").v)
            return out
        if isinstance(v, self.torch.Size):
            return list(v)
        raise Unsupported("sizes")

    def _options(self, args) -> Options:
        opt = Options()
        torch = self.torch
        for a in args:
            if isinstance(a, Options):
                opt = opt.merged(a)
            elif isinstance(a, torch.dtype):
                opt.dtype = a
            elif isinstance(a, torch.device):
                opt.device = a
            else:
                raise Unsupported("factory argument")
        return opt

    def factory(self, short: str, args):
        torch = self.torch
        if short.endswith("_like"):
            src, rest = args[0], args[1:]
            value = None
            if short == "full_like":
                value, rest = args[1], args[2:]
            opt = self._options(rest)
            kw = {k: v for k, v in (("dtype", opt.dtype), ("device", opt.device)) if v is not None}
            fn = getattr(torch, short)
            return fn(src, _scalar(value), **kw) if value is not None else fn(src, **kw)
        sizes = self._sizes(args[0])
        rest = args[1:]
        value = None
        if short == "full":
            value, rest = args[1], args[2:]
        if short == "empty_strided":
            strides, rest = self._sizes(args[1]), args[2:]
        opt = self._options(rest)
        kw = {k: v for k, v in (("dtype", opt.dtype), ("device", opt.device)) if v is not None}
        if short == "full":
            return torch.full(sizes, _scalar(value), **kw)
        if short == "empty_strided":
            return torch.empty_strided(sizes, strides, **kw)
        return getattr(torch, short)(sizes, **kw)

    def member(self, obj, member: str, targs, args, scopes):  # noqa: C901 - torch's Tensor API subset
        torch = self.torch
        if isinstance(obj, Dim3) and args is None:
            return Num(getattr(obj, member), "uint32")
        if isinstance(obj, Options):
            if member in ("dtype", "device") and args is not None:
                new = Options(obj.dtype, obj.device)
                setattr(new, member, self._dtype_arg(args[0]) if member == "dtype" else self._device(args[0]))
                return new
            raise Unsupported(f"TensorOptions.{member}")
        if isinstance(obj, Stream) and member == "stream" and args == []:
            return obj
        if isinstance(obj, torch.device) and args == [] and member in ("index", "is_cuda"):
            cuda = obj.type == "cuda" or self.p.launcher is not None
            return Num(obj.index or 0, "int32") if member == "index" else Num(int(cuda), "bool")
        if isinstance(obj, torch.Size) and member == "size" and args == []:
            return Num(len(obj), "uint64")
        if isinstance(obj, (list, tuple)) and args is not None:
            if member == "size" and not args:
                return Num(len(obj), "uint64")
            if member == "empty" and not args:
                return Num(int(not obj), "bool")
            if member in ("begin", "end") and not args:
                return _Iter(obj, 0 if member == "begin" else len(obj))
            if member in ("vec", "clone") and not args:
                return list(obj)
            if member == "back" and not args and obj:
                return obj[-1]
            if member in ("push_back", "emplace_back") and len(args) == 1 and isinstance(obj, list):
                obj.append(args[0])
                return None
        if isinstance(obj, _Iter) and args is None:
            raise Unsupported("iterator member")
        if not isinstance(obj, torch.Tensor):
            raise Unsupported(f".{member} on {type(obj).__name__}")
        t = obj
        if args is None:
            raise Unsupported(f"tensor member {member}")
        if member in ("size", "stride"):
            if not args:
                raise Unsupported(f"{member}()")
            d = args[0].v
            n = t.dim()
            if not -n <= d < n:
                raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
            return Num(t.size(d) if member == "size" else t.stride(d), "int64")
        if member in ("sizes", "strides") and not args:
            return [Num(x, "int64") for x in (t.shape if member == "sizes" else t.stride())]
        if member == "numel":
            return Num(t.numel(), "int64")
        if member == "dim" or member == "ndimension":
            return Num(t.dim(), "int64")
        if member in ("element_size", "itemsize"):
            return Num(t.element_size(), "int64")
        if member in ("data_ptr", "mutable_data_ptr", "const_data_ptr"):
            ctype = (targs or "<void>")[1:-1].strip()
            if ctype == "scalar_t":
                ctype = self._scalar_t(scopes) or ctype
            if targs:
                want = _CTYPE_DTYPE.get(ctype)
                if want is None:
                    raise Unsupported(f"data_ptr<{ctype}>")
                want = [getattr(torch, w) for w in want]
                if t.dtype not in want:
                    raise RuntimeError(f"expected scalar type {_dtype_name(want[0])} but found "
                                       f"{_dtype_name(t.dtype)}")
            return Ptr(t.data_ptr(), ctype)
        if member == "options":
            return Options(t.dtype, t.device)
        if member in ("dtype", "scalar_type"):
            return t.dtype
        if member == "device":
            return t.device
        if member in ("is_cuda", "is_contiguous"):
            cuda = t.is_cuda or self.p.launcher is not None   # a dry run on the CPU plays the GPU
            return Num(int(cuda if member == "is_cuda" else t.is_contiguous()), "bool")
        if member == "defined":
            return Num(1, "bool")
        if member in ("contiguous", "clone", "detach", "t", "zero_"):
            return getattr(t, member)()
        if member in ("view", "reshape", "permute", "expand"):
            return getattr(t, member)(self._sizes(args[0] if len(args) == 1 else args))
        if member in ("transpose", "narrow", "select", "unsqueeze", "squeeze", "flatten", "slice"):
            vals = []
            for a in args:     # integers (an end of None): a tensor here is read on the host, value by value, as
                if not isinstance(a, Num) and a is not None:    # aten::narrow.Tensor does (red team 23's gather)
                    raise Unsupported(f"Tensor.{member} with a {type(a).__name__} where an integer goes (its value "
                                      "would be read on the host)")
                vals.append(a.v if isinstance(a, Num) else a)
            if member == "slice":
                d, s, e = (vals + [0, 0, None])[:3]
                return t.narrow(d, s, (e if e is not None else t.size(d)) - s)
            return getattr(t, member)(*vals)
        if member == "fill_":
            return t.fill_(_scalar(args[0]))
        if member == "to" and len(args) == 1 and isinstance(args[0], (torch.dtype, torch.device)):
            return t.to(args[0])
        if member == "copy_" and isinstance(args[0], torch.Tensor):
            return t.copy_(args[0])
        raise Unsupported(f"Tensor.{member}")

    # -- launches ------------------------------------------------------------------------
    def _check_pointer(self, kname: str, i: int, param, want: str, arg: Ptr, scopes) -> None:
        """nvcc refuses a launch whose pointer argument points to another type than the parameter
        (float* for a double* parameter, void* for a float* one): the real extension would not build.
        Checked only between known element types; a struct or typedef of the source is not judged."""
        try:
            want = self._resolve(want, scopes) if "scalar_t" in want else want
            got = self._resolve(arg.ctype, scopes) if "scalar_t" in arg.ctype else arg.ctype
        except Unsupported:
            return
        refuse_pointer(self.p.name, kname, i, param, want, got)

    def launch(self, e, scopes):
        _, kname, targs, config, args_nodes = e
        kernel = self.p.kernels.get(kname)
        if kernel is None:
            raise Unsupported(f"launch of {kname}, which is not a __global__ function of the source")
        scalar = self._scalar_t(scopes)
        consts = {}
        if targs:
            for tok in tokenize(targs[1:-1]):
                if re.match(r"^[A-Za-z_]\w*$", tok) and tok != "scalar_t":
                    try:
                        v = self.lookup(tok, scopes)[1]
                        if isinstance(v, Num):
                            consts[tok] = v.v
                    except KeyError:
                        pass
        expr = self.p.name_expression(kname, targs, scalar, consts)
        lowered = self.p.lowered.get(expr)
        if lowered is None:
            raise Unsupported(f"kernel {expr} was not instantiated at compile time")
        cfg = [self.eval(c, scopes) for c in config]
        if len(cfg) < 2 or len(cfg) > 4:
            raise Unsupported("launch configuration")
        grid, block = (_dim3([c]) if isinstance(c, Num) else c for c in cfg[:2])
        smem = cfg[2].v if len(cfg) > 2 else 0
        stream = 0
        if len(cfg) > 3:
            st = cfg[3]
            if not isinstance(st, (Stream, Num)):
                raise Unsupported("stream argument")
            stream = st.ptr if isinstance(st, Stream) else st.v
        subst = dict(zip((n for _, n in kernel.template), _template_values(targs, scalar, consts)))
        args = [self.eval(a, scopes) for a in args_nodes]
        if len(args) != len(kernel.params):
            raise Unsupported(f"{kname} launched with {len(args)} arguments for {len(kernel.params)} parameters")
        packed = []
        for i, (p, a) in enumerate(zip(kernel.params, args)):
            if p.pointer:
                if isinstance(a, Ptr):
                    self._check_pointer(kname, i, p, subst.get(p.ctype, p.ctype), a, scopes)
                    packed.append(np.uint64(a.addr))
                elif isinstance(a, Num) and a.v == 0:
                    packed.append(np.uint64(0))
                else:
                    raise Unsupported(f"argument {p.name} of {kname}: {type(a).__name__} for a pointer")
                continue
            ctype = subst.get(p.ctype, p.ctype)
            num = _CTYPE_NUM.get(ctype)
            if num is None or not isinstance(a, Num):
                raise Unsupported(f"argument {p.name} of {kname} ({p.ctype})")
            packed.append(_NP[num](Num(a.v, num).v))
        try:
            if self.p.launcher is not None:   # tests: the launch recorded, not run
                self.p.launcher(expr, (grid.x, grid.y, grid.z), (block.x, block.y, block.z), int(smem), stream,
                                packed)
                return None
            if stream is None:
                stream = self.torch.cuda.current_stream().cuda_stream
            fn = self.p.cuda_module._function(lowered)
            fn((grid.x, grid.y, grid.z), (block.x, block.y, block.z), tuple(packed), shared_mem=int(smem),
               stream=self.p.cuda_module._stream(stream))
        except Exception as err:  # noqa: BLE001 - a failed launch is CUDA's last error, as with <<<>>>
            code = getattr(err, "status", None)
            self.p.last_error = int(code) if isinstance(code, int) and code else 1
            return None
        nvrtc._count_launch()
        return None


# Pointee types that are one C++ type under several names (torch's and CUDA's aliases), for the
# launch's pointer check; a name not here is not checked. int64_t is long on Linux and long long in
# NVRTC's headers: both are taken as one, so the check never refuses what nvcc would take.
_POINTEE = {"float": "float", "double": "double", "int": "int", "int32_t": "int", "signed int": "int",
            "unsigned int": "uint", "uint32_t": "uint", "unsigned": "uint",
            "int64_t": "int64", "long": "int64", "long long": "int64", "long int": "int64",
            "uint64_t": "uint64", "unsigned long": "uint64", "unsigned long long": "uint64", "size_t": "uint64",
            "short": "int16", "int16_t": "int16", "unsigned short": "uint16", "uint16_t": "uint16",
            "char": "char", "signed char": "int8", "int8_t": "int8", "unsigned char": "uint8", "uint8_t": "uint8",
            "bool": "bool", "half": "__half", "__half": "__half", "at::Half": "c10::Half", "c10::Half": "c10::Half",
            "__nv_bfloat16": "__nv_bfloat16", "nv_bfloat16": "__nv_bfloat16", "at::BFloat16": "c10::BFloat16",
            "c10::BFloat16": "c10::BFloat16", "float2": "float2", "float4": "float4", "half2": "__half2",
            "__half2": "__half2", "__nv_bfloat162": "__nv_bfloat162", "nv_bfloat162": "__nv_bfloat162",
            "double2": "double2", "int2": "int2", "int4": "int4", "void": "void"}

def refuse_pointer(program: str, kname: str, i: int, param, want: str, got: str) -> None:
    """BuildError where nvcc refuses a `got *` argument for a `want *` parameter; both names must be known."""
    w, g = _POINTEE.get(" ".join(want.split())), _POINTEE.get(" ".join(got.split()))
    if w is None or g is None or w == g or w == "void":
        return
    raise BuildError(f'error: argument of type "{" ".join(got.split())} *" is incompatible with parameter of type '
                     f'"{param.ctype} *" (argument {i + 1}, {param.name}, of {kname})', program,
                     "the host code does not compile (nvcc rejects this launch, so the real load_inline would "
                     "not build it)")


_NP = {"int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64, "llong": np.int64,
       "ullong": np.uint64, "int16": np.int16,
       "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "char": np.int8, "bool": np.bool_,
       "float": np.float32, "double": np.float64}
_CTYPE_DTYPE = {"float": ("float32",), "double": ("float64",), "int": ("int32",), "int32_t": ("int32",),
                "int64_t": ("int64",), "long": ("int64",), "long long": ("int64",), "at::Half": ("float16",),
                "c10::Half": ("float16",), "half": ("float16",), "__half": ("float16",),
                "at::BFloat16": ("bfloat16",), "c10::BFloat16": ("bfloat16",), "__nv_bfloat16": ("bfloat16",),
                "bool": ("bool",), "uint8_t": ("uint8",), "unsigned char": ("uint8",), "int8_t": ("int8",),
                "int16_t": ("int16",), "short": ("int16",), "scalar_t": None}


def _template_values(targs, scalar, consts) -> list[str]:
    if not targs:
        return []
    out, cur, depth = [], [], 0
    for tok in tokenize(targs[1:-1]):
        if tok == "," and depth == 0:
            out.append(" ".join(cur))
            cur = []
            continue
        depth += tok == "<"
        depth -= tok == ">"
        cur.append(scalar if tok == "scalar_t" and scalar else str(consts.get(tok, tok)))
    out.append(" ".join(cur))
    return out


def _dtype_name(dt) -> str:
    names = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
             "int64": "Long", "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short"}
    return names.get(str(dt).replace("torch.", ""), str(dt))
