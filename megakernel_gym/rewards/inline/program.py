"""A parsed translation unit (Program: its functions, namespaces, constants and kernels) and the
module a candidate's load_inline returns (FastInlineModule).
"""
from __future__ import annotations

import re
from typing import Any, Callable


from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards.inline.check import HostCheck, _blank, _check_binding, _constant_expr, _dispatch_types, _kernel_of, _namespace_scope, _namespaces_at
from megakernel_gym.rewards.inline.headers import STUB_HEADERS, TORCH_NVCC_DEFINES, _NVRTC_IGNORE, _NVRTC_PASS
from megakernel_gym.rewards.inline.interpret import HostFunction, Interpreter, refuse_pointer
from megakernel_gym.rewards.inline.parse import Parser, _QUALIFIERS
from megakernel_gym.cuda.source_rules import splice_lines
from megakernel_gym.rewards.inline.preprocess import (TopFunction, _HOST_MACROS, _directives, _namespace_depths,
                                                      _strip_comments, expand_macros, macros_before, source_rules,
                                                      tokenize, top_level_functions)
from megakernel_gym.rewards.inline.subset import BuildError, CudaRuntimeError, Unsupported
from megakernel_gym.rewards.inline.values import Kernel, Num, _CTYPE_NUM



# ---------------------------------------------------------------------------------------
# the module


class FastInlineModule:
    """What `load_inline` returns, built without a host compiler: one attribute per function."""

    def __init__(self, name: str, functions: dict[str, "HostFunction"], kernel_names: list[str], gpu: bool):
        self.__name__ = name
        self._functions = functions
        self.kernel_names = kernel_names
        self._gpu = gpu

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        fns = self.__dict__.get("_functions", {})
        if attr not in fns:
            raise AttributeError(f"module {self.__dict__.get('__name__')!r} has no attribute {attr!r}")
        return fns[attr]

    def __dir__(self):
        return list(self._functions)


class Program:
    """The parsed source: kernels, host functions, compiled module."""

    def __init__(self, name: str, cpp: str, cuda: str, functions: list[str] | None, cuda_flags: list[str],
                 gpu: bool):
        self.name, self.gpu = name, gpu
        # as a compiler reads them: lines spliced, then comments out; then what the judge does not read as one does
        cuda_nc = _strip_comments(splice_lines(cuda))
        cpp_nc = _strip_comments(splice_lines(cpp))
        source_rules(cuda_nc)
        source_rules(cpp_nc)
        cuda_code, macros = _directives(cuda_nc)
        cpp_code, cpp_macros = _directives(cpp_nc)
        self._defined = {"cpp": cpp_macros, "cuda": macros}    # each source's own, for macros_before
        tops = top_level_functions(cuda_code)
        cpp_tops = top_level_functions(cpp_code)
        self.kernels: dict[str, Kernel] = {}
        for f in tops:
            if re.search(r"\b__global__\b", f.head):
                if f.name in self.kernels:
                    raise Unsupported(f"kernel {f.name} is overloaded")
                self.kernels[f.name] = _kernel_of(f)
        pyb = [f for f in tops + cpp_tops if f.name == "PYBIND11_MODULE"]
        for f in pyb:
            _check_binding(f.body)
        exported: dict[str, str] = {}
        if functions is None:
            if not pyb:
                raise Unsupported("no functions= and no PYBIND11_MODULE")
            for m in re.finditer(r"\.def\s*\(\s*\"(\w+)\"\s*,\s*&?\s*([\w:]+)", pyb[0].body):
                exported[m.group(1)] = m.group(2).split("::")[-1]
        else:
            if isinstance(functions, str):
                functions = [functions]
            if isinstance(functions, dict):
                functions = list(functions)
            exported = {f: f for f in functions}
        self.hosts: dict[str, TopFunction] = {}
        self.host_file: dict[str, str] = {}   # "cpp" (g++ builds it) or "cuda" (nvcc), for their error wording
        self.template_hosts: set[str] = set()
        for f, file in [(f, "cpp") for f in cpp_tops] + [(f, "cuda") for f in tops]:
            if not f.host or f.name == "PYBIND11_MODULE":
                continue
            if re.search(r"\btemplate\b", f.head):
                self.template_hosts.add(f.name)
                continue
            if f.name in self.hosts:
                raise Unsupported(f"the host function {f.name} is defined twice (overloads are not taken)")
            self.hosts[f.name] = f
            self.host_file[f.name] = file
        self.ns_vars: set[str] = set()    # namespace-scope variables that are not const: host code may not use them
        ns_consts: set[str] = set()
        for code, fns in ((cpp_code, cpp_tops), (cuda_code, tops)):
            variables, consts = _namespace_scope(code, fns)
            self.ns_vars |= variables
            ns_consts |= consts
        missing = [c for c in exported.values() if c not in self.hosts]
        if missing:
            raise Unsupported(f"no definition of {', '.join(missing)} in the sources")
        # device source: the CUDA text with host-only functions and the binding blanked out
        device = cuda_nc
        for f in sorted(tops, key=lambda f: -f.start):
            if (not f.device) or f.name == "PYBIND11_MODULE":
                device = device[:f.start] + _blank(device[f.start:f.end]) + device[f.end:]
        self.device_source = device
        self.types = {m.group(1) for m in re.finditer(r"\b(?:struct|class|typedef\s+[\w\s*]+?)\s+(\w+)\s*[{;]",
                                                        cuda_code + "\n" + cpp_code)}
        self.parsed: dict[str, tuple] = {}
        self.globals: dict[str, Any] = {}       # namespace-scope constants, read-only once loaded
        self.launcher: Callable | None = None   # tests record launches here instead of running them
        self.last_error = 0
        for code, fns, file in ((cpp_code, cpp_tops, "cpp"), (cuda_code, tops, "cuda")):
            self._read_constants(code, fns, file)
        self.const_names = set(self.globals) | ns_consts
        self.using_std = bool(re.search(r"\busing\s+(?:namespace\s+std\s*;|std::(?:min|max)\b)", cpp_code + cuda_code))
        for cname, f in self.hosts.items():
            try:
                self.parsed[cname] = self._parse_function(f)
            except Unsupported as e:
                raise Unsupported(f"in {cname}(): {e.construct}") from None
        HostCheck(self).run()
        self._check_launch_pointers()
        self.names = self._name_expressions()
        opts = list(TORCH_NVCC_DEFINES)   # NVRTC has no --expt-relaxed-constexpr; the std stubs are __host__ __device__
        for flag in cuda_flags:
            if _NVRTC_PASS.match(flag):
                opts.append(flag)
            elif not _NVRTC_IGNORE.match(flag):
                raise Unsupported(f"nvcc flag {flag!r}")
        self.options = tuple(opts)
        self.cubin, self.lowered = nvrtc.compile_program(self.device_source, f"{name}.cu", self.options,
                                                         headers=STUB_HEADERS, name_expressions=tuple(self.names))
        self.cuda_module = nvrtc.CudaModule(self.device_source, f"{name}.cu", self.cubin)
        self.exported = exported

    _CONST = re.compile(r"(?:^|(?<=[;{}\n]))\s*(?:(?:static|inline)\s+)*(?:const|constexpr)\s+(?:static\s+)?"
                        r"(" + "|".join(sorted(map(re.escape, _CTYPE_NUM), key=len, reverse=True)) +
                        r")\s+(\w+)\s*=\s*([^;{}]+);")

    def _macros_at(self, file: str, at: int) -> dict:
        """The macros C++ applies at offset `at` of the cpp or the cuda source (preprocess.macros_before)."""
        return macros_before(self._defined[file], at, _HOST_MACROS)

    def _read_constants(self, code: str, fns: list[TopFunction], file: str) -> None:
        """Namespace-scope `const int BLOCK = 256;`, enumerators and the like, which host code may read."""
        inside = _namespace_depths(code)
        for m in re.finditer(r"\benum\s+(class\s+|struct\s+)?(\w+)?\s*(?::\s*[\w\s]+)?\{([^}]*)\}", code):
            if any(f.start <= m.start() < f.end for f in fns):
                continue
            value = -1
            for item in m.group(3).split(","):
                name, _, expr = (x.strip() for x in item.partition("="))
                if not name:
                    continue
                try:
                    node = Parser(tokenize(expr), set(), set()).expr() if expr else None
                    if node is not None and not _constant_expr(node, self.globals):
                        break
                    value = Interpreter(self).eval(node, [self.globals]).v if expr else value + 1
                except (Unsupported, AttributeError, KeyError):
                    break
                scoped = f"{m.group(2)}::{name}" if m.group(2) else None
                for key in ([scoped] if m.group(1) else [name, scoped]):
                    if key:
                        self.globals[key] = Num(value, "int32")
        for m in self._CONST.finditer(code):
            if any(f.start <= m.start() < f.end for f in fns) or not inside(m.start()):
                continue
            try:
                toks = expand_macros(tokenize(m.group(3)), self._macros_at(file, m.start(2)))
                node = Parser(toks, set(), set()).expr()
                if not _constant_expr(node, self.globals):
                    continue   # a dynamic initializer: not read, so a use of it is refused by name
                value = Interpreter(self).convert(m.group(1), Interpreter(self).eval(node, [self.globals]))
                for key in (m.group(2), *(f"{ns}::{m.group(2)}" for ns in _namespaces_at(code, m.start(2)))):
                    self.globals[key] = value
            except (Unsupported, CudaRuntimeError, KeyError, IndexError):
                continue  # a constant the host code cannot use; reading it would be Unsupported

    def _parse_function(self, f: TopFunction) -> tuple:
        macros = self._macros_at(self.host_file[f.name], f.start + len(f.head))    # (at its body's brace)
        toks = expand_macros(tokenize(f.body), macros)
        params = []
        ptoks = tokenize(f.params)
        if ptoks and ptoks != ["void"]:
            p = Parser(ptoks + [","], set(self.kernels), self.types)
            while p.peek():
                ctype = p.parse_type()
                pname = p.next() if p.peek() not in (",", "=") else f"arg{len(params)}"
                if p.peek() == "=":
                    raise Unsupported("default arguments")
                p.expect(",")
                params.append((ctype, pname, p.quals))
        ret = " ".join(t for t in expand_macros(tokenize(f.ret), macros)
                       if t not in _QUALIFIERS and t not in ("__host__", "__forceinline__"))
        body = Parser(["{"] + toks + ["}"], set(self.kernels), self.types)
        tree = body.parse_block()
        if body.peek():
            raise Unsupported("trailing tokens after a host function")
        return (ret, params, tree)

    def compile_error(self, nvcc: str, gpp: str, file: str = "cuda"):
        """What nvcc (a .cu source) or g++ (a .cpp one) says of host code they refuse: the real build would
        fail, so the fast path fails the same way, in their words."""
        raise BuildError(f"error: {nvcc if file == 'cuda' else gpp}", self.name,
                         f"the host code does not compile ({'nvcc' if file == 'cuda' else 'g++'} refuses it, so "
                         "torch's load_inline would not build it)")

    def _check_launch_pointers(self) -> None:
        """A launch whose pointer argument has a type nvcc refuses for its parameter, where both are
        plain in the text (x.data_ptr<float>(), a cast): nvcc fails the build, so the fast path does too,
        at load, before it would run anything (the interpreter checks the launches it cannot see here)."""
        def pointee(node):
            if node[0] == "cast" and node[1].endswith("*"):
                return node[1][:-1].replace("const", "")
            if node[0] == "call" and node[1][0] == "member" and node[1][2] in ("data_ptr", "mutable_data_ptr",
                                                                               "const_data_ptr"):
                return (node[1][3] or "<void>")[1:-1]
            if node[0] == "call" and node[1][0] == "name" and node[1][1].split("::")[-1] in (
                    "reinterpret_cast", "static_cast", "const_cast") and (node[1][2] or "").endswith("*>"):
                return node[1][2][1:-2].replace("const", "")
            return None

        def walk(node):
            if isinstance(node, list):
                for x in node:
                    walk(x)
                return
            if not isinstance(node, tuple) or not node:
                return
            if node[0] == "launch" and node[1] in self.kernels:
                kernel = self.kernels[node[1]]
                generic = {n for _, n in kernel.template}
                for i, (param, arg) in enumerate(zip(kernel.params, node[4])):
                    got = pointee(arg) if param.pointer and isinstance(arg, tuple) else None
                    if got is None or param.ctype in generic or "scalar_t" in got:
                        continue
                    refuse_pointer(self.name, node[1], i, param, param.ctype, got)
            for x in node[1:]:
                walk(x)
        for _, _, tree in self.parsed.values():
            walk(tree)

    def _name_expressions(self) -> list[str]:
        """Every kernel instantiation the host code can launch, for NVRTC to keep and name."""
        names: list[str] = []
        consts = {k: v.v for k, v in self.globals.items() if isinstance(v, Num)}

        def constant(node):   # a local `const int TILE = 16;` that a template argument may name
            if node[0] == "decl" and node[3] is not None and node[3][0] == "init" and _CTYPE_NUM.get(node[1]):
                try:
                    v = Interpreter(self).eval(node[3][1], [self.globals, {}])
                    if isinstance(v, Num):
                        consts[node[2]] = Num(v.v, _CTYPE_NUM[node[1]]).v
                except (Unsupported, CudaRuntimeError, KeyError, IndexError, TypeError):
                    pass

        def walk(node, scalar_types):
            if isinstance(node, tuple):
                if node:
                    constant(node) if node[0] == "decl" else None
                if node and node[0] == "launch" and node[1] in self.kernels:
                    for st in scalar_types:
                        names.append(self.name_expression(node[1], node[2], st, consts))
                if node and node[0] == "dispatch":
                    types = _dispatch_types(node[1])
                    for a in node[2]:
                        walk(a, [t for t in types if t in ("float", "double")] or [None])
                    return
                if node and node[0] == "name" and node[1] in self.kernels and not self.kernels[node[1]].template:
                    names.append(node[1])
                for x in node:
                    walk(x, scalar_types)
            elif isinstance(node, list):
                for x in node:
                    walk(x, scalar_types)
        for _, _, tree in self.parsed.values():
            walk(tree, [None])
        return [n for n in dict.fromkeys(names) if n]

    def name_expression(self, kernel: str, targs: str | None, scalar_t: str | None, consts: dict) -> str:
        k = self.kernels[kernel]
        if not k.template:
            if targs:
                raise Unsupported(f"template arguments for the plain kernel {kernel}")
            return kernel
        if not targs:
            raise Unsupported(f"templated kernel {kernel} launched without template arguments")
        toks = tokenize(targs[1:-1])
        out = []
        for t in toks:
            if t == "scalar_t":
                if scalar_t is None:
                    raise Unsupported("scalar_t outside AT_DISPATCH")
                out.append(scalar_t)
            elif t in consts:
                out.append(str(consts[t]))
            else:
                out.append(t)
        args = re.sub(r"\s*::\s*", "::", re.sub(r"\s*,\s*", ", ", " ".join(out)))
        return f"{kernel}<{args}>"
