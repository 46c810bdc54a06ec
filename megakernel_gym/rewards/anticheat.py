"""Static anti-cheat: rules over the candidate's AST and its CUDA/C++ source strings.

These run in the judge's own process before anything of the candidate executes, so they
only parse. The dynamic rules (aten ops seen during forward, kernels that ran, output
aliasing, side streams) live in `sandbox.py`, where the candidate runs.

Every finding is a Flag with a stable rule name; any flag makes the status `rejected`.
Rules over torch's namespaces fire where a name is used, not where it is imported (KernelBench's
own example kernels import torch.nn.functional as F and never use it). Code the judge never runs,
the `get_inputs`/`get_init_inputs` and the `class Model` that LLM answers repeat from the problem,
may compute with torch (see `_unjudged_bodies`); every other rule still holds there.
Rule names: forbidden_import, torch_compute, try_except, monkeypatch, timing, concurrency,
seed_access, introspection, forbidden_library, problem_forbidden, and guard (what the run-time guard's
compile refuses, rewards/guard.py, checked here too so that it is refused before a worker starts).
"""
from __future__ import annotations

import ast
import codecs
import io
import re
import tokenize
from collections.abc import Iterable

from megakernel_gym.rewards.problem import ast_depth, deep_call, parse_python
from megakernel_gym.rewards.result import Flag

# Modules a candidate may import (top-level name). Everything else is `forbidden_import`,
# with a more specific rule where the module has an obvious purpose.
ALLOWED_IMPORTS = {
    "torch", "triton", "math", "megakernel_gym", "typing", "functools", "__future__",
    "dataclasses", "collections", "itertools", "operator",
}
# What a candidate may use of this package: the NVRTC loader. The judge, the problems, their
# reference kernels and the export loader are off limits (an import of a shipped reference
# kernel would score someone else's kernel as the candidate's own).
CANDIDATE_API = ("megakernel_gym.load_cuda",)
_IMPORT_RULES = {
    "time": "timing", "timeit": "timing", "datetime": "timing",
    "threading": "concurrency", "multiprocessing": "concurrency", "concurrent": "concurrency",
    "asyncio": "concurrency", "subprocess": "concurrency", "_thread": "concurrency",
    "random": "seed_access", "secrets": "seed_access",
    "inspect": "introspection", "gc": "introspection", "sys": "introspection",
    "builtins": "introspection", "importlib": "introspection", "ctypes": "introspection",
    "traceback": "introspection", "types": "introspection",
}

# torch.<name> calls that allocate, describe or configure, but compute nothing.
TORCH_ALLOWED_CALLS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "Size", "device", "dtype", "is_tensor",
    "is_floating_point", "no_grad", "inference_mode", "finfo", "iinfo", "get_default_dtype",
    "promote_types", "result_type",
    "cuda.current_device", "cuda.current_stream", "cuda.is_available", "cuda.get_device_capability",
    "cuda.get_device_properties", "cuda.device", "cuda.device_count",
    "nn.Parameter", "nn.Module", "nn.ModuleList", "nn.ModuleDict", "nn.ParameterList", "nn.Buffer",
    "utils.cpp_extension.load_inline",
}
# drawn in a class's __init__ the way a problem's own Model draws parameters (nn.Parameter(torch.randn(shape)));
# the weights are replaced by Model's before any check, and in forward these are refused
TORCH_INIT_CALLS = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "normal", "randperm"}
# nn layers may be built (to keep Model's state_dict keys) but not called in forward; calling
# one is an aten op that the dynamic check sees. So constructors under torch.nn are allowed.
_TORCH_ALLOWED_PREFIXES = ("nn.init.",)

# torch sub-namespaces that are never a candidate's business, referenced or called.
TORCH_FORBIDDEN_NAMESPACES = {
    "ops": "torch_compute", "compile": "torch_compute", "jit": "torch_compute", "_C": "torch_compute",
    "_dynamo": "torch_compute", "_inductor": "torch_compute", "library": "torch_compute",
    "_ops": "torch_compute", "func": "torch_compute", "nn.functional": "torch_compute",
    "linalg": "torch_compute", "fft": "torch_compute", "special": "torch_compute",
    "sparse": "torch_compute", "_refs": "torch_compute", "_prims": "torch_compute",
    "_decomp": "torch_compute", "fx": "torch_compute", "export": "torch_compute",
    "backends": "monkeypatch", "overrides": "monkeypatch", "utils._python_dispatch": "monkeypatch",
    "cuda.Stream": "concurrency", "cuda.stream": "concurrency", "cuda.ExternalStream": "concurrency",
    "cuda.set_stream": "concurrency", "cuda.graph": "concurrency", "cuda.CUDAGraph": "concurrency",
    "cuda.graphs": "concurrency", "multiprocessing": "concurrency",
    "cuda.Event": "timing", "cuda.synchronize": "timing", "cuda.nvtx": "timing",
    "profiler": "timing", "autograd.profiler": "timing", "utils.benchmark": "timing",
    "initial_seed": "seed_access", "seed": "seed_access", "manual_seed": "seed_access",
    "get_rng_state": "seed_access", "set_rng_state": "seed_access", "random": "seed_access",
    "Generator": "seed_access", "default_generator": "seed_access",
    "cuda.manual_seed": "seed_access", "cuda.manual_seed_all": "seed_access",
    "cuda.initial_seed": "seed_access", "cuda.get_rng_state": "seed_access",
    "cuda.set_rng_state": "seed_access", "cuda.seed": "seed_access", "cuda.random": "seed_access",
    "cuda.default_generators": "seed_access",
}
TRITON_FORBIDDEN = {"testing": "timing", "runtime.driver": "monkeypatch"}
# What makes a function a Triton kernel, or reaches Triton's machinery for making one: a candidate names
# these only as the decorator above a def (`@triton.jit`, `@triton.autotune(...)`), where the jit-body
# rules (jit_rules.jit_body_problems) find the function. `k = triton.jit(f)`, `J = triton.jit` then `@J`, or
# `triton.JITFunction(f)` made kernels whose bodies no rule read, and which Triton's CPU interpreter runs
# as plain Python: host numpy compute, torch with the dispatch watcher switched off (red team, session 43).
KERNEL_MAKERS = {"jit", "autotune", "heuristics", "JITFunction", "KernelInterface", "constexpr_function",
                 "aggregate", "compile", "set_allocator", "knobs", "MockTensor", "FutureKernel", "AsyncCompileMode"}
KERNEL_MAKER_NAMESPACES = ("runtime", "compiler", "tools", "backends")
# What a candidate names of those namespaces all the same: the host's tensor descriptor (a tensor's base, shape,
# strides and block shape, passed to a kernel whose desc.load/desc.store a GPU runs with TMA), the form Triton
# keeps for tiled loads where 3.9 dropped block pointers. It makes no kernel and runs no code of the candidate's;
# under the interpreter its loads and stores are bounded like any other (triton_cpu.Bounds walks its base).
KERNEL_TOOLS_ALLOWED = {"triton.tools.tensor_descriptor", "triton.tools.tensor_descriptor.TensorDescriptor",
                        "triton.tools.tensor_descriptor.TensorDescriptor.from_tensor"}


def kernel_maker(full: str) -> bool:
    """Whether a resolved dotted path (triton.jit, triton.runtime.jit.JITFunction) is one of KERNEL_MAKERS."""
    if not full.startswith("triton.") or full in KERNEL_TOOLS_ALLOWED:
        return False
    parts = full.split(".")
    return parts[1] in KERNEL_MAKERS or parts[1] in KERNEL_MAKER_NAMESPACES or parts[-1] in ("jit", "JITFunction")
# Namespaces whose every function is an aten op (the dynamic check sees each one that runs): the
# compute a repeated `class Model` uses. The rest (ops, compile, jit, _C, library...) can load
# code or step around the dispatcher, so they stay forbidden everywhere.
_PLAIN_COMPUTE_NAMESPACES = {"nn.functional", "linalg", "fft", "special"}

# Tensor methods that compute. Called anywhere outside a @triton.jit function: torch_compute.
COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "addmv", "baddbmm", "mv", "dot", "einsum", "softmax",
    "log_softmax", "sum", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin",
    "exp", "exp_", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "relu_", "gelu", "silu",
    "norm", "pow", "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "addcmul",
    "addcdiv", "where", "masked_fill", "masked_fill_", "sort", "topk", "cumsum", "cumprod", "prod",
    "abs", "clamp", "clamp_", "clip", "layer_norm", "rms_norm", "linear", "conv1d", "conv2d",
    "conv3d", "logsumexp", "square", "reciprocal", "neg", "lerp", "outer", "tensordot",
    "scaled_dot_product_attention", "baddbmm_", "addmm_", "square_", "erf", "softplus",
    "hardtanh", "leaky_relu", "elu", "selu", "mish", "logaddexp", "cross_entropy", "nll_loss",
}

_BUILTIN_RULES = {
    "eval": "introspection", "exec": "introspection", "compile": "introspection",
    "__import__": "introspection", "globals": "introspection", "locals": "introspection",
    "vars": "introspection", "open": "introspection", "breakpoint": "introspection",
    "input": "introspection", "memoryview": "introspection", "delattr": "monkeypatch",
    "exit": "introspection", "quit": "introspection",
}
_ALLOWED_DUNDERS = {"__init__", "__name__", "__future__", "__call__"}
# Attribute names that reach the operating system through another module (torch.os,
# triton.runtime.jit.sys, ...): never a kernel's business, whatever the base.
_SYSTEM_ATTRS = {"os", "sys", "subprocess", "ctypes", "builtins", "importlib", "signal", "socket",
                 "shutil", "pickle", "marshal", "multiprocessing", "threading", "inspect", "gc", "time",
                 "_thread", "pathlib", "tempfile", "io", "resource", "fcntl", "mmap", "atexit", "runpy"}
# Frames of generators, coroutines and tracebacks: their f_globals and f_builtins reach every name
# of a module (and __import__) without naming it, past the rules above and past `_unjudged_bodies`.
_FRAME_ATTRS = {"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_globals", "f_locals", "f_builtins", "f_back"}

# Inside CUDA C / C++ source text: library calls and host-side escapes.
_SOURCE_RULES: list[tuple[str, str, str]] = [
    (r"cublas", "forbidden_library", "cuBLAS"),
    (r"cudnn", "forbidden_library", "cuDNN"),
    (r"cutlass|cute::", "forbidden_library", "CUTLASS"),
    (r"\bcusparse|\bcufft|\bcurand_|\bnccl", "forbidden_library", "a CUDA library"),
    # at::/torch:: names that allocate, describe or configure (types, dtypes, options, guards, the
    # current stream, accessors); any other at::/torch:: name is a compute call.
    (r"\b(?:at|torch)::(?!(?:empty|zeros|ones|full)(?:_like|_strided)?\b|Tensor\b|TensorOptions\b|"
     r"IntArrayRef\b|ScalarType\b|Scalar\b|Device\b|DeviceType\b|Layout\b|MemoryFormat\b|dtype\b|device\b|"
     r"k(?:Float|Int|UInt|BFloat|Half|Double|Long|Short|Byte|Char|Bool|ComplexFloat|ComplexDouble)\w*\b|"
     r"kCUDA\b|kCPU\b|kStrided\b|Half\b|BFloat16\b|acc_type\b|opmath_type\b|"
     r"RestrictPtrTraits\b|DefaultPtrTraits\b|TensorAccessor\b|(?:Generic)?PackedTensorAccessor(?:32|64)?\b|"
     r"(?:Optional)?DeviceGuard\b|cuda::(?:getCurrentCUDAStream|getDefaultCUDAStream|CUDAStream|CUDAGuard|"
     r"OptionalCUDAGuard|getCurrentDeviceProperties|current_device)\b)\w+", "torch_compute",
     "an ATen/torch C++ compute call"),
    (r"\.(?:matmul|mm|bmm|addmm|softmax|sum|mean|exp|relu|layer_norm)\s*\(", "torch_compute",
     "a tensor compute method in C++"),
    (r"cudaStreamCreate|cudaStreamBegin|cudaLaunchHostFunc|cudaGraph|\bstd::thread|pthread_create|"
     r"#\s*include\s*<thread>", "concurrency", "streams, graphs or threads"),
    (r"cudaEvent|std::chrono|clock_gettime|gettimeofday", "timing", "host timing"),
    (r"\bsystem\s*\(|\bpopen\s*\(|\bfork\s*\(|\bkill\s*\(|\bexecv\w*\s*\(|\bdlopen\s*\(|"
     r"\bfopen\s*\(|#\s*include\s*<(?:unistd|signal|dlfcn|fstream)", "introspection",
     "host system calls"),
]
_SOURCE_HINT = re.compile(r"__global__|#\s*include|extern\s+\"C\"|torch::|at::|PYBIND11|<<<")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, extra_forbidden: Iterable[str] = ()):
        self.flags: list[Flag] = []
        self.aliases: dict[str, str] = {}     # local name -> full dotted module path
        self.extra_forbidden = [f for f in extra_forbidden if f]
        self.unjudged: set[int] = set()       # ids of function nodes whose bodies the judge never runs
        self._in_jit = 0
        self._in_unjudged = 0
        self._in_init = 0                     # inside a class's __init__ (torch RNG allowed there)
        self._class_depth = 0
        self._decorator_heads: set[int] = set()   # a def's decorators (or what a decorator call calls)
        self.top_level: set[int] | None = None     # ids of the module's top-level defs (check_candidate)

    @property
    def _compute_ok(self) -> bool:
        """Inside a Triton kernel, or in code the judge never runs: torch compute findings are off."""
        return bool(self._in_jit or self._in_unjudged)

    def flag(self, rule: str, detail: str, node: ast.AST | None = None) -> None:
        line = getattr(node, "lineno", None)
        if not any(f.rule == rule and f.line == line and f.detail == detail for f in self.flags):
            self.flags.append(Flag(rule, detail, line))

    # -- imports -------------------------------------------------------------------------
    def bind_imports(self, tree: ast.AST) -> None:
        """Every import's names, before any use is checked: a use above its import (in a function
        defined before an import at the bottom of the file) resolves like any other."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}"

    def _check_module(self, mod: str, node: ast.AST) -> None:
        top = mod.split(".")[0]
        if top not in ALLOWED_IMPORTS:
            rule = _IMPORT_RULES.get(top, "forbidden_import")
            self.flag(rule, f"import of {mod!r} (allowed: {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))})", node)
        else:
            self._check_path(mod, node, imported=True)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(a.name, node)
        self.bind_imports(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("forbidden_import", "relative import", node)
            return
        mod = node.module or ""
        self._check_module(mod, node)
        for a in node.names:
            if a.name == "*":
                self.flag("forbidden_import", f"star import from {mod!r}", node)
                continue
            if mod.split(".")[0] in ALLOWED_IMPORTS:
                self._check_path(f"{mod}.{a.name}", node, imported=True)
        self.bind_imports(node)

    # -- names ---------------------------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        d = _dotted(node)
        if d is None:
            return None
        head, _, rest = d.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return None

    def _check_path(self, full: str, node: ast.AST, imported: bool = False) -> None:
        """A reference to a module attribute path, e.g. torch.nn.functional.softmax. `imported`: the
        path is named by an import statement. Importing one of torch's namespaces runs nothing of
        the candidate's, so those rules wait for a use; importing our package's modules runs our
        code, so that rule fires at the import."""
        if full.startswith("megakernel_gym.") and not any(full == a or full.startswith(a + ".") for a in CANDIDATE_API):
            self.flag("forbidden_import", f"use of {full}: of megakernel_gym a candidate may use "
                                          f"{', '.join(CANDIDATE_API)} alone", node)
            return
        if full.startswith("torch.") and not imported:
            sub = full[len("torch."):]
            for ns, rule in TORCH_FORBIDDEN_NAMESPACES.items():
                if sub == ns or sub.startswith(ns + "."):
                    if not (self._in_unjudged and ns in _PLAIN_COMPUTE_NAMESPACES):
                        self.flag(rule, f"use of torch.{sub}", node)
                    return
        if full.startswith("triton."):
            sub = full[len("triton."):]
            for ns, rule in TRITON_FORBIDDEN.items():
                if sub == ns or sub.startswith(ns + "."):
                    self.flag(rule, f"use of triton.{sub}", node)
        for forb in self.extra_forbidden:
            if not self._in_unjudged and (full == forb or full.endswith("." + forb) or full.startswith(forb + ".")):
                self.flag("problem_forbidden", f"{full} is forbidden by this problem", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in _ALLOWED_DUNDERS:
            self.flag("introspection", f"access to {node.attr}", node)
        if node.attr in _SYSTEM_ATTRS:
            self.flag("introspection", f"access to .{node.attr} (the operating system through another module)", node)
        if node.attr in _FRAME_ATTRS:
            self.flag("introspection", f"access to .{node.attr} (a frame: every global and builtin by name)", node)
        full = self.resolve(node)
        if full:
            self._check_path(full, node)
            self._check_kernel_maker(node, full)
        if isinstance(node.value, ast.Name) and node.value.id in ("__builtins__",):
            self.flag("introspection", "access to __builtins__", node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in _ALLOWED_DUNDERS:
            self.flag("introspection", f"use of {node.id}", node)
        if node.id in self.aliases and isinstance(node.ctx, ast.Load):
            self._check_path(self.aliases[node.id], node)
            self._check_kernel_maker(node, self.aliases[node.id])
        for forb in self.extra_forbidden:
            if node.id == forb and not self._in_unjudged:
                self.flag("problem_forbidden", f"{node.id} is forbidden by this problem", node)
        self.generic_visit(node)

    # -- calls ---------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        full = self.resolve(func)
        if full and not self._compute_ok:
            if full.startswith("torch."):
                sub = full[len("torch."):]
                if sub in TORCH_ALLOWED_CALLS or sub.startswith(_TORCH_ALLOWED_PREFIXES):
                    pass
                elif sub in TORCH_INIT_CALLS and self._in_init:
                    pass
                elif sub == "nn.Module.__init__":
                    pass   # the base class's constructor, called explicitly
                elif sub.startswith("nn.") and sub.split(".")[-1][:1].isupper():
                    pass  # building a layer (keeps Model's state_dict keys); calling it is dynamic-checked
                elif sub.startswith(("float", "bfloat", "int", "uint", "bool", "half", "double")):
                    pass
                else:
                    self.flag("torch_compute", f"call to torch.{sub} outside a kernel", node)
        if isinstance(func, ast.Name):
            rule = _BUILTIN_RULES.get(func.id)
            if rule and func.id not in self.aliases:
                self.flag(rule, f"call to {func.id}()", node)
            if func.id in ("setattr", "getattr", "hasattr") and node.args:
                target = node.args[0]
                if not (isinstance(target, ast.Name) and target.id == "self"):
                    self.flag("monkeypatch" if func.id == "setattr" else "introspection",
                              f"{func.id}() on {ast.unparse(target)}", node)
                elif len(node.args) > 1 and not isinstance(node.args[1], ast.Constant):
                    self.flag("introspection", f"{func.id}(self, <computed name>)", node)
        if isinstance(func, ast.Attribute) and not self._compute_ok and func.attr in COMPUTE_METHODS:
            # self.ext.softmax(x) is the candidate's own extension (load_inline / load_cuda);
            # if it were a tensor method instead, the dynamic aten check still sees it.
            own_ext = isinstance(func.value, ast.Attribute) and isinstance(func.value.value, ast.Name) \
                and func.value.value.id == "self"
            if not own_ext and not (full and full.startswith(("triton.", "math.", "megakernel_gym.", "operator."))):
                self.flag("torch_compute", f"call to .{func.attr}() outside a kernel", node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._compute_ok:
            self.flag("torch_compute", "matrix product with @ outside a kernel", node)
        self.generic_visit(node)

    # -- statements ----------------------------------------------------------------------
    def visit_Try(self, node) -> None:
        self.flag("try_except", "try/except around candidate code (a hidden fallback path)", node)
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _check_store_target(self, t: ast.AST, node: ast.AST) -> None:
        if isinstance(t, (ast.Attribute, ast.Subscript)):
            base = t
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name) and base.id in self.aliases:
                self.flag("monkeypatch", f"assignment to {ast.unparse(t)} (a module attribute)", node)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self._check_store_target(e, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_store_target(t, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store_target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_store_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_store_target(t, node)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.flag("monkeypatch", f"global statement ({', '.join(node.names)}): state kept across calls", node)

    def _is_jit(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        full = self.resolve(target) or ""
        return full.startswith("triton.") and full.split(".")[-1] in ("jit", "autotune", "heuristics")

    def _check_kernel_maker(self, node: ast.AST, full: str | None) -> None:
        if full and id(node) not in self._decorator_heads and kernel_maker(full):
            self.flag("kernel_form", f"{full} named other than as the decorator above a def: a Triton kernel is "
                                     f"written `@triton.jit` (or `@triton.autotune(...)`) directly above its "
                                     f"`def`, where the judge checks its body", node)

    def visit_FunctionDef(self, node) -> None:
        self._decorator_heads.update(id(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list)
        for d in node.decorator_list:
            self.visit(d)
        if node.returns is not None:
            self.visit(node.returns)   # evaluated when the def runs, as the decorators are
        jit = any(self._is_jit(d) for d in node.decorator_list)
        if jit and self.top_level is not None and id(node) not in self.top_level:
            self.flag("kernel_form", f"the Triton kernel {node.name} is defined inside another block: define "
                                     "@triton.jit functions at the module's top level, where the judge checks "
                                     "their bodies (a nested one is never run)", node)
        self._in_jit += jit
        self.visit(node.args)
        unjudged = id(node) in self.unjudged
        self._in_unjudged += unjudged
        init = node.name == "__init__" and self._class_depth > 0
        self._in_init += init
        depth, self._class_depth = self._class_depth, 0   # a def inside __init__ is not __init__
        for stmt in node.body:
            self.visit(stmt)
        self._class_depth = depth
        self._in_init -= init
        self._in_unjudged -= unjudged
        self._in_jit -= jit

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._class_depth += 1
        self.generic_visit(node)
        self._class_depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        unjudged = id(node) in self.unjudged   # a main guard: its body never runs in the judge
        self.visit(node.test)
        self._in_unjudged += unjudged
        for stmt in node.body:
            self.visit(stmt)
        self._in_unjudged -= unjudged
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _SOURCE_HINT.search(node.value):
            check_source_text(node.value, self, node)


def check_source_text(text: str, checker: _Checker | None = None, node: ast.AST | None = None) -> list[Flag]:
    """Rules over CUDA C / C++ source (a string constant in the candidate)."""
    own = checker or _Checker()
    # (an unclosed comment runs to the end in one match: `/\*.*?\*/` alone rescanned the rest of the text from
    # every '/*', quadratic: red team 11's 120 KB string of '/*a' held the judge process 47 s, before any worker)
    body = re.sub(r"/\*.*?(?:\*/|\Z)", " ", text, flags=re.S)
    body = re.sub(r"//[^\n]*", " ", body)
    base = getattr(node, "lineno", 1) or 1
    for pattern, rule, what in _SOURCE_RULES:
        m = re.search(pattern, body, flags=re.I if rule == "forbidden_library" else 0)
        if m:
            line = base + body[:m.start()].count("\n")
            own.flag(rule, f"{what} in kernel source: {m.group(0)!r}", ast.Constant(value=None, lineno=line))
    return own.flags


def _unjudged_bodies(tree: ast.Module, checker: _Checker) -> set[int]:
    """The function nodes whose bodies the judge never runs: a top-level `get_inputs` or
    `get_init_inputs`, and the methods of a top-level `class Model` where a ModelNew is the
    candidate (the judge takes inputs and the reference from the problem's own module).

    Only while nothing can reach them: no name or attribute outside those bodies says `Model`,
    `get_inputs` or `get_init_inputs`, and no decorator, metaclass or base other than nn.Module
    receives the function or class. (A call from forward would still meet the dynamic check, but
    a call from __init__ or from module level runs where no check watches.)"""
    names = {"get_inputs", "get_init_inputs"}
    if candidate_class(tree) == "ModelNew":
        names.add("Model")
    bodies: dict[str, list[ast.FunctionDef]] = {}
    for d in tree.body:
        if not isinstance(d, (ast.FunctionDef, ast.ClassDef)) or d.name not in names or d.decorator_list:
            continue
        if isinstance(d, ast.FunctionDef):
            bodies.setdefault(d.name, []).append(d)
        elif not d.keywords and all(checker.resolve(b) == "torch.nn.Module" for b in d.bases) \
                and all(_inert_class_statement(st) for st in d.body):
            bodies.setdefault(d.name, []).extend(m for m in d.body
                                                 if isinstance(m, ast.FunctionDef) and not m.decorator_list)
    # `if __name__ == "__main__":` at top level (an LLM's smoke test of its answer) never runs: the
    # judge imports the candidate under another name, and nothing may rebind __name__
    guards = [] if any(isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load)
                       for n in ast.walk(tree)) else [d for d in tree.body if _is_main_guard(d)]
    while True:   # a body that something reaches is live, and what it names is reached in turn
        dormant = {id(x) for fns in bodies.values() for f in fns for stmt in f.body for x in ast.walk(stmt)}
        dormant |= {id(x) for g in guards for stmt in g.body for x in ast.walk(stmt)}
        named = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(tree)
                 if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in dormant}
        reached = [name for name in bodies if name in named]
        if not reached:
            return {id(f) for fns in bodies.values() for f in fns} | {id(g) for g in guards}
        for name in reached:
            del bodies[name]


def _inert_class_statement(st: ast.AST) -> bool:
    """A statement of a `class Model` body that runs nothing and hands nothing out as the class is
    defined: a method, a docstring, `pass`, or a constant bound to a name (KernelBench's ResNet block's
    `expansion = 1`). Any other (`REGISTRY.append(forward)` hands forward out while the class body runs,
    red team, session 43) makes the class's methods judged like any other code."""
    if isinstance(st, ast.FunctionDef):
        return not st.decorator_list
    if isinstance(st, ast.Pass) or isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
        return True
    if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        consts = [st.value] if not isinstance(st.value, ast.Tuple) else st.value.elts
        return all(isinstance(t, ast.Name) for t in targets) and all(isinstance(c, ast.Constant) for c in consts)
    return False


def _is_main_guard(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return (isinstance(node, ast.If) and not node.orelse and isinstance(t, ast.Compare) and len(t.ops) == 1
            and isinstance(t.ops[0], ast.Eq) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value == "__main__")


# PEP 263's declaration, on a file's first or second line
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-_.a-zA-Z0-9]+)")


def encoding_flags(source: str) -> list[Flag]:
    """A source-encoding declaration other than UTF-8. The judge reads the candidate as the text it was
    given, and Python's compile() of a string ignores the declaration, but whatever reads the candidate's
    file again (Triton reads a kernel's source from it, through linecache) decodes by it: under `# coding:
    utf-7` a comment's `+AAo-` is a newline, so one comment the rules read as a comment became lines of
    code in the kernel body Triton ran (red team, session 43: numpy softmax scored correct)."""
    flags = []
    # the lines as Python's tokenizer (and linecache, which Triton reads through) split them: at \n, \r\n and \r
    # only; str.splitlines() also splits at U+2028 and the like, so a declaration after one on the first line
    # was read by the tokenizer and not here (red team 16)
    for i, line in enumerate(re.split(r"\r\n|\r|\n", source)[:2], 1):
        m = _CODING.match(line)
        if m:
            try:
                name = codecs.lookup(m.group(1)).name
            except LookupError:
                name = m.group(1)
            if name != "utf-8":
                flags.append(Flag("source_encoding", f"the source-encoding declaration {m.group(1)!r}: a candidate "
                                                     "is UTF-8 text; drop the line", i))
        if not line.lstrip().startswith("#") and line.strip():
            break    # a declaration counts only in the comments that open the file
    if not flags:     # and as the reader itself decides it
        try:
            found = tokenize.detect_encoding(io.BytesIO(source.encode("utf-8", "surrogatepass")).readline)[0]
        except SyntaxError as e:
            found = str(e)
        if found not in ("utf-8", "utf-8-sig"):
            flags.append(Flag("source_encoding", f"Python's tokenizer reads the source as {found!r}: a candidate is "
                                                 "UTF-8 text; drop the declaration", 1))
    return flags


def check_candidate(source: str, extra_forbidden: Iterable[str] = ()) -> list[Flag]:
    """All static flags for a candidate's Python source. Raises SyntaxError if it does not parse."""
    tree = parse_python(source, "<candidate>")
    return deep_call(_check_tree, source, tree, extra_forbidden, depth=ast_depth(tree))


def _check_tree(source: str, tree: ast.Module, extra_forbidden: Iterable[str]) -> list[Flag]:
    checker = _Checker(extra_forbidden)
    checker.bind_imports(tree)
    checker.unjudged = _unjudged_bodies(tree, checker)
    checker.top_level = {id(n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    checker.visit(tree)
    return encoding_flags(source) + checker.flags + guard_policy_flags(source)


def guard_policy_flags(source: str) -> list[Flag]:
    """What the run-time guard's compile (rewards/guard.py: RestrictedPython's syntax allowlist, our
    naming rules, the @triton.jit body rules) would refuse, found here before any worker starts."""
    from megakernel_gym.rewards.guard import compile_candidate
    try:
        compile_candidate(source, "<candidate>")
    except SyntaxError as e:
        errors = e.msg if isinstance(e.msg, tuple) else (e.args[0] if isinstance(e.args[0], tuple) else (str(e),))
        flags = []
        for text in errors[:10]:
            m = re.match(r"Line (\d+): (.*)", str(text), re.S)
            flags.append(Flag("guard", m.group(2) if m else str(text), int(m.group(1)) if m else None))
        return flags
    return []


CANDIDATE_CLASSES = ("ModelNew", "Model")
NO_CANDIDATE_CLASS = ("the candidate defines no ModelNew class (nor a Model class of its own); define class "
                      "ModelNew(nn.Module), or class Model(nn.Module) as in KernelBench-v3, with the same "
                      "constructor arguments as the problem's Model")


def candidate_class(source: str | ast.Module) -> str | None:
    """The class the judge runs: `ModelNew`, else `Model` (the KernelBench-v3 convention: the
    candidate's own module's Model, never the problem's), else None. Raises SyntaxError."""
    tree = parse_python(source, "<candidate>") if isinstance(source, str) else source
    defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return next((c for c in CANDIDATE_CLASSES if c in defined), None)


def defines_modelnew(source: str) -> bool:
    """Kept for callers of the old name: the candidate defines a class the judge can run."""
    return candidate_class(source) is not None
