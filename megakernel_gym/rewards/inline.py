"""KernelBench's `load_inline`, fast: device code through NVRTC, the host wrapper interpreted.

`torch.utils.cpp_extension.load_inline` builds a whole Python extension with nvcc and g++
against torch's headers: about 50 s cold on an H100 host, far too slow for an RL reward.
Yet the host code of a KernelBench-format candidate is nearly always the same small
wrapper: check the inputs, allocate outputs, compute a grid, launch, return. So:

- the `__global__`/`__device__` code is compiled by NVRTC (tens of milliseconds), with the
  defines torch's own nvcc build uses, stub headers in place of torch's, and name expressions
  so that C++ (mangled, templated) kernels are found by their source names;
- the host functions are parsed into a small C++ subset and run by an interpreter here, with
  C++'s integer semantics (widths, promotions, wrap-around, truncating division) and torch's calls
  mapped to the same ATen ops (`torch::empty` -> `torch.empty`, so the judge's dispatch checks see
  them exactly as they would see the C++ calls); `<<<...>>>` launches go through CuPy on the same
  stream a real launch would use (the legacy default stream unless a stream is given), and a
  failed launch is recorded for `cudaGetLastError()` instead of raised, as CUDA does.

The candidate owns its process, so its host C++ never runs natively: there is no fallback to
torch's real build. Before anything runs, `HostCheck` reads every host function and refuses
what the interpreter does not allow (`Unsupported`, the candidate's compile_error, whose message
names the construct and ends with `SUPPORTED_HOST_SUBSET`): any call outside an allowlist
(qualified or found by argument-dependent lookup), writes to namespace-scope variables or static
locals, references that alias variables, threads, inline assembly, extern declarations. Where
nvcc or g++ would refuse the source (assignment to a const, std::min of two types) the error is
theirs, in their words (`BuildError`). tests/corpus/inline_diff/ holds the cases on which the
interpreter is checked against what nvcc and g++ compile and compute.

On a machine without a GPU the fast path still compiles the device code and checks the host
code, which gives compile feedback; calling the module then says that running it needs the gpu
backend. (torch's real build stays reachable for benches that compare the two paths on trusted
code: `real_build`, the judge's fast_inline=False; never for a candidate by default.)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from megakernel_gym.rewards import nvrtc

# What torch's cpp_extension passes to nvcc (torch.utils.cpp_extension.COMMON_NVCC_FLAGS): the
# same defines here, so half/bfloat16 operators that fail under load_inline fail here too.
TORCH_NVCC_DEFINES = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                      "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__")
_NVRTC_PASS = re.compile(r"^(?:--?use_fast_math|--?ftz=\w+|--?prec-div=\w+|--?prec-sqrt=\w+|--?fmad=\w+|"
                         r"-D\w+(?:=\S*)?|-U\w+)$")
_NVRTC_IGNORE = re.compile(r"^(?:-O\d?|-g|-G|-lineinfo|--?std=c\+\+1[47]|--?std=c\+\+17|-Xptxas=?.*|-v|-w|"
                           r"--ptxas-options=.*|-arch=.*|--gpu-architecture=.*|-gencode=?.*|arch=.*|"
                           r"-Xcompiler=?.*|-fPIC|-Wall|-Wextra|-res-usage|--resource-usage|--expt-relaxed-constexpr|"
                           r"--extended-lambda|--expt-extended-lambda|)$")

_STD = r"""
#pragma once
namespace std {
template <class T> __host__ __device__ constexpr const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> __host__ __device__ constexpr const T& max(const T& a, const T& b) { return a < b ? b : a; }
__device__ inline float exp(float x) { return ::expf(x); }  __device__ inline double exp(double x) { return ::exp(x); }
__device__ inline float log(float x) { return ::logf(x); }  __device__ inline double log(double x) { return ::log(x); }
__device__ inline float sqrt(float x) { return ::sqrtf(x); } __device__ inline double sqrt(double x) { return ::sqrt(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); } __device__ inline double tanh(double x) { return ::tanh(x); }
__device__ inline float fabs(float x) { return ::fabsf(x); } __device__ inline double fabs(double x) { return ::fabs(x); }
__device__ inline float abs(float x) { return ::fabsf(x); }  __device__ inline double abs(double x) { return ::fabs(x); }
__device__ inline float erf(float x) { return ::erff(x); }  __device__ inline double erf(double x) { return ::erf(x); }
__device__ inline float pow(float x, float y) { return ::powf(x, y); }
__device__ inline double pow(double x, double y) { return ::pow(x, y); }
__device__ inline float fmax(float x, float y) { return ::fmaxf(x, y); }
__device__ inline float fmin(float x, float y) { return ::fminf(x, y); }
__device__ inline float floor(float x) { return ::floorf(x); } __device__ inline float ceil(float x) { return ::ceilf(x); }
template <class T> struct numeric_limits;
template <> struct numeric_limits<float> {
  __host__ __device__ static constexpr float max() { return 3.402823466e+38F; }
  __host__ __device__ static constexpr float lowest() { return -3.402823466e+38F; }
  __host__ __device__ static constexpr float min() { return 1.175494351e-38F; }
  __host__ __device__ static constexpr float epsilon() { return 1.192092896e-07F; }
  __host__ __device__ static float infinity() { return __int_as_float(0x7f800000); }
};
template <> struct numeric_limits<int> {
  __host__ __device__ static constexpr int max() { return 2147483647; }
  __host__ __device__ static constexpr int lowest() { return -2147483647 - 1; }
  __host__ __device__ static constexpr int min() { return -2147483647 - 1; }
};
}
"""
_MATH = r"""
#pragma once
#include <__mkgym_std.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_E 2.7182818284590452354
#define M_LN2 0.69314718055994530942
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#define M_2_SQRTPI 1.12837916709551257390
#define HUGE_VALF INFINITY
"""
_FLOAT = r"""
#pragma once
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F
#define DBL_MAX 1.7976931348623158e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-016
"""
_INT = r"""
#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t; typedef long long intptr_t; typedef unsigned long long uintptr_t;
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295U
#define LLONG_MAX 9223372036854775807LL
"""
# torch's headers bring the standard library along (an nvcc build of a .cu with
# torch/extension.h has <cmath>, <cstdint>, <algorithm>): their stubs do the same.
_TORCH = "#pragma once\n#include <__mkgym_std.h>\n#include <cmath>\n#include <cstdint>\n#include <cfloat>\n"
STUB_HEADERS: dict[str, str] = {"__mkgym_std.h": _STD, "cmath": _MATH, "math.h": _MATH, "cfloat": _FLOAT,
                                "float.h": _FLOAT, "cstdint": _INT, "stdint.h": _INT, "climits": _INT,
                                "limits.h": _INT, "limits": _TORCH, "algorithm": _TORCH}
for _h in ("torch/extension.h", "torch/torch.h", "torch/types.h", "torch/all.h", "ATen/ATen.h",
           "ATen/cuda/CUDAContext.h", "ATen/cuda/CUDAEvent.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAStream.h",
           "ATen/cuda/CUDAGuard.h", "c10/cuda/CUDAException.h", "ATen/Dispatch.h", "ATen/native/TensorIterator.h",
           "pybind11/pybind11.h", "torch/python.h", "c10/util/Half.h", "c10/util/BFloat16.h",
           "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h", "vector", "iostream",
           "string", "tuple", "utility", "cstdio", "stdio.h", "cstdlib", "stdlib.h", "cassert", "assert.h",
           "sstream", "stdexcept", "type_traits", "memory", "functional", "array", "numeric", "cstring",
           "string.h", "cstddef", "stddef.h"):
    STUB_HEADERS.setdefault(_h, _TORCH)


# What the interpreter may call: every other name is refused at load (HostCheck), whatever
# namespace it is in or however C++ would find it (argument-dependent lookup finds at::softmax for
# an unqualified softmax(x, 1)). Allocation, metadata, options, guards and the current stream only:
# nothing that computes but the copies and fills behind contiguous/clone/copy_/fill_/zero_/to.
FACTORIES = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "empty_strided")
CHECKS = ("TORCH_CHECK", "AT_ASSERTM", "TORCH_INTERNAL_ASSERT", "assert")
LIBRARY_CALLS = frozenset(
    {f"{ns}::{f}" for ns in ("torch", "at") for f in FACTORIES + ("TensorOptions", "dtype", "device")}
    | {f"{ns}{f}" for ns in ("std::", "") for f in ("min", "max", "fmin", "fmax", "ceil", "floor", "sqrt", "log2",
                                                   "abs", "fabs", "to_string")}
    | {"ceilf", "floorf", "sqrtf", "fminf", "fmaxf", "fabsf"}
    | {"cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString", "cudaDeviceSynchronize",
       "cudaStreamSynchronize", "cudaFuncSetAttribute", "C10_CUDA_KERNEL_LAUNCH_CHECK", "C10_CUDA_CHECK",
       "AT_CUDA_CHECK", "CUDA_CHECK", "printf", "fprintf", "at::cuda::getCurrentCUDAStream",
       "c10::cuda::getCurrentCUDAStream", "at::cuda::getDefaultCUDAStream", "dim3", "std::vector",
       "std::make_tuple", "std::tuple", "std::make_pair", "std::runtime_error", "std::invalid_argument",
       "c10::Error", "static_cast", "reinterpret_cast", "const_cast"} | set(CHECKS))
TENSOR_METADATA = ("size", "sizes", "stride", "strides", "numel", "dim", "ndimension", "element_size", "itemsize",
                   "data_ptr", "mutable_data_ptr", "const_data_ptr", "options", "dtype", "scalar_type", "device",
                   "is_cuda", "is_contiguous", "defined")
TENSOR_VIEWS = ("view", "reshape", "permute", "expand", "transpose", "narrow", "select", "unsqueeze", "squeeze",
                "flatten", "slice", "t", "detach")
TENSOR_COPIES = ("contiguous", "clone", "copy_", "fill_", "zero_", "to")
OTHER_MEMBERS = ("index", "stream", "begin", "end", "empty", "vec", "back", "push_back", "emplace_back", "x", "y", "z")
MEMBERS = frozenset(TENSOR_METADATA + TENSOR_VIEWS + TENSOR_COPIES + OTHER_MEMBERS)
GUARDS = frozenset(f"{ns}::{g}" for ns in ("at::cuda", "c10::cuda") for g in ("CUDAGuard", "OptionalCUDAGuard")) | \
    frozenset(f"{ns}::{g}" for ns in ("at", "c10") for g in ("DeviceGuard", "OptionalDeviceGuard"))
DISPATCH_MACROS = ("AT_DISPATCH_FLOATING_TYPES", "AT_DISPATCH_FLOATING_TYPES_AND_HALF", "AT_DISPATCH_FLOATING_TYPES_AND2")

SUPPORTED_HOST_SUBSET = f"""\
load_inline host code never runs natively: the judge's interpreter runs it, and takes this C++ subset.
Statements: local declarations, if/else, for, while, switch, break, continue, return, throw,
{", ".join(CHECKS)}, #define macros (no #if), AT_DISPATCH_FLOATING_TYPES[_AND_HALF|_AND2](t, "name", [&] {{...}}).
Values: integer and floating scalars (C++'s conversions and wrap-around), auto, dim3, torch::Tensor,
TensorOptions, ScalarType, Device, std::vector/std::tuple of these, pointers from data_ptr<T>() and
casts (never dereferenced); namespace-scope const/constexpr scalars and enums, read-only.
Calls: the source's own non-template host functions; torch::/at:: {", ".join(FACTORIES)},
TensorOptions().dtype().device(); tensor {", ".join(TENSOR_METADATA)};
views {", ".join(TENSOR_VIEWS)}; copies {", ".join(TENSOR_COPIES)};
CUDAGuard/OptionalCUDAGuard/DeviceGuard; at::cuda::getCurrentCUDAStream(); cudaGetLastError,
cudaPeekAtLastError, cudaGetErrorString, cudaDeviceSynchronize, cudaFuncSetAttribute,
C10_CUDA_KERNEL_LAUNCH_CHECK; std::min/max, ceil, floor, sqrt, log2, abs; kernel<<<grid, block[, smem[, stream]]>>>(...)
of the source's __global__ functions.
Refused: any other ATen/torch/c10 call (qualified, or unqualified and found by argument-dependent lookup),
cuBLAS/cuDNN/CUTLASS or any library, threads, lambdas outside AT_DISPATCH, function pointers, writes to
namespace-scope variables, static locals (no state across calls), references aliasing a variable,
inline assembly, extern declarations, constructor attributes."""


class Unsupported(nvrtc.CudaCompileError):
    """Host code outside the interpreter's subset. Nothing else builds a load_inline extension (its
    host C++ never runs natively), so this is the candidate's compile_error: `construct` names what
    was refused, and the message ends with the subset the interpreter takes."""

    category = "host_code"   # the EvalResult's category (sandbox._categorize_exception)

    def __init__(self, construct: str, name: str = ""):
        self.construct, self.name = construct, name
        self.log = f"{construct}\n\n{SUPPORTED_HOST_SUBSET}"
        head = f"{name}: the judge's load_inline cannot take this host code: " if name else ""
        RuntimeError.__init__(self, f"{head}{construct}" + (f"\n{SUPPORTED_HOST_SUBSET}" if name else ""))

    def named(self, name: str) -> "Unsupported":
        """The refusal as the candidate reads it: the extension's name, the construct, the subset."""
        return self if self.name else Unsupported(self.construct, name)


class CudaRuntimeError(RuntimeError):
    """What a failed CUDA runtime call raises in the host wrapper (TORCH_CHECK, C10_CUDA_CHECK...)."""


class BuildError(nvrtc.CudaCompileError):
    """The extension does not build: torch's load_inline failed (`log` is nvcc's and g++'s output), or
    the fast path found host code that nvcc rejects. Either way the result is a compile_error."""

    def __init__(self, log: str, name: str, what: str):
        self.log, self.name = log[-20000:], name
        # the compiler's error lines first: a build's output opens with long nvcc and g++ command lines
        errors = [ln for ln in log.splitlines() if re.search(r"\berror\b", ln, re.I)
                  and not ln.lstrip().startswith(("[", "FAILED:", "ninja:"))]
        RuntimeError.__init__(self, f"{name}: {what}:\n" + ("\n".join(errors[:20]) or log[-4000:]))


def real_build(orig: Callable) -> Callable:
    """torch's load_inline, whose build failure is a BuildError carrying the build's output. The output
    is captured (verbose off: verbose only prints it) so that the agent reads nvcc's message."""
    def build(*a, **kw):
        a = list(a)
        if len(a) > 11:
            a[11] = False
        else:
            kw["verbose"] = False
        try:
            return orig(*a, **kw)
        except RuntimeError as e:
            text = str(e)
            if not text.startswith("Error building extension"):
                raise
            name = a[0] if a else kw.get("name", "extension")
            raise BuildError(text.partition(": ")[2] or text, str(name),
                             "torch's load_inline could not build the extension") from e
    return build


# ---------------------------------------------------------------------------------------
# source text: comments, directives, top-level functions


def _strip_comments(src: str) -> str:
    """Comments become spaces (newlines kept, so line numbers hold); strings are left alone."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass
class Macro:
    params: list[str] | None
    body: str


# The numeric macros torch's headers bring into host code (<cmath>, <cfloat>, <climits>), from the stubs
# the device code gets; INFINITY and NAN are named values (their stub definitions are device intrinsics).
_HOST_MACROS = {m.group(1): Macro(None, m.group(2).strip())
                for m in re.finditer(r"^#define (\w+) (.+)$", _MATH + _FLOAT + _INT, re.M)
                if m.group(1) not in ("INFINITY", "NAN", "HUGE_VALF")}


def _directives(src: str) -> tuple[str, dict[str, Macro]]:
    """Preprocessor lines blanked out of the text (line numbers kept), #defines collected."""
    lines = src.split("\n")
    macros: dict[str, Macro] = {}
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            full, k = line, i
            while full.endswith("\\") and k + 1 < len(lines):
                k += 1
                full = full[:-1] + " " + lines[k]
            m = re.match(r"\s*#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)$", full)
            if m:
                params = [p.strip() for p in m.group(3).split(",")] if m.group(2) is not None else None
                if params == [""]:
                    params = []
                macros[m.group(1)] = Macro(params, m.group(4).strip())
            elif re.match(r"\s*#\s*(if|ifdef|ifndef|else|elif|endif|undef)\b", full):
                if not re.match(r"\s*#\s*pragma", full):
                    raise Unsupported("conditional compilation (#if) in the source")
            out.extend(" " * len(lines[x]) for x in range(i, k + 1))   # same length: positions hold
            i = k + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out), macros


def _match_brace(text: str, i: int, open_c: str = "{", close_c: str = "}") -> int:
    """Index just past the bracket that closes the one at text[i]."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise Unsupported("unbalanced brackets")


_DEF_HEAD = re.compile(r"(?:^|(?<=[;}{\n]))([ \t]*(?:template\s*<[^{};]*>\s*)?(?:[\w:<>,&*\s]|__launch_bounds__\s*\([^)]*\)|"
                       r"\"C\")*?\b(\w+)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*(?:const\s*)?)\{", re.S)


@dataclass
class TopFunction:
    name: str
    head: str        # everything before the body's brace: return type, qualifiers, parameters
    ret: str         # the part of head before the name
    params: str
    body: str
    start: int
    end: int

    @property
    def device(self) -> bool:
        return bool(re.search(r"\b(__global__|__device__)\b", self.head))

    @property
    def host(self) -> bool:
        return not self.device or bool(re.search(r"\b__host__\b", self.head))


def top_level_functions(code: str) -> list[TopFunction]:
    """Function definitions at namespace scope (not inside structs or other bodies)."""
    found, pos = [], 0
    depth_ok = _namespace_depths(code)
    while True:
        m = _DEF_HEAD.search(code, pos)
        if not m:
            break
        brace = m.end() - 1
        end = _match_brace(code, brace)
        name = m.group(2)
        if depth_ok(m.start(1)) and name not in ("if", "for", "while", "switch", "return", "sizeof"):
            found.append(TopFunction(name, m.group(1), code[m.start(1):m.start(2)], m.group(3),
                                     code[brace + 1:end - 1], m.start(1), end))
            pos = end
        else:
            pos = brace + 1
    return found


def _namespace_depths(code: str) -> Callable[[int], bool]:
    """Whether a position is at namespace scope: outside every brace but `namespace {...}` ones."""
    inside: list[tuple[int, int]] = []
    for m in re.finditer(r"\b(struct|class|union|enum)\b[^;{]*\{", code):
        inside.append((m.end() - 1, _match_brace(code, m.end() - 1)))
    return lambda p: not any(a <= p < b for a, b in inside)


# ---------------------------------------------------------------------------------------
# tokens and the host-code parser


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\])*")
  | (?P<chr>'(?:\\.|[^'\\])')
  | (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|0[bB][01]+[uUlL]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFlLuU]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op><<<|>>>|<<=|>>=|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|[-+*/%<>=!~&|^?:;,.(){}\[\]#])
""", re.X)


def tokenize(text: str) -> list[str]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Unsupported(f"unexpected character {text[pos]!r} in host code")
        if m.lastgroup != "ws":
            toks.append(m.group(0))
        pos = m.end()
    return toks


def _paste(toks: list[str], macro: str) -> list[str]:
    """`a ## b` joined into one token, as the preprocessor does (the result must be one token)."""
    out: list[str] = []
    k = 0
    while k < len(toks):
        if toks[k] == "#" and k + 1 < len(toks) and toks[k + 1] == "#":
            right = toks[k + 2] if k + 2 < len(toks) else ""
            joined = (out.pop() if out else "") + right
            if joined:
                pasted = tokenize(joined)
                if len(pasted) != 1:
                    raise Unsupported(f"macro {macro} pastes {joined!r}, which is not one token")
                out.append(pasted[0])
            k += 3
            continue
        out.append(toks[k])
        k += 1
    return out


def expand_macros(toks: list[str], macros: dict[str, Macro], depth: int = 0) -> list[str]:
    if depth > 20:
        raise Unsupported("macros nest too deep")
    out, i, changed = [], 0, False
    while i < len(toks):
        t = toks[i]
        mac = macros.get(t)
        if mac is None:
            out.append(t)
            i += 1
            continue
        if mac.params is None:
            out.extend(_paste(tokenize(mac.body), t))
            i += 1
            changed = True
            continue
        if i + 1 >= len(toks) or toks[i + 1] != "(":
            out.append(t)
            i += 1
            continue
        args, cur, d, j = [], [], 0, i + 2
        while j < len(toks):
            tk = toks[j]
            if tk in "([{":
                d += 1
            elif tk in ")]}":
                if d == 0 and tk == ")":
                    break
                d -= 1
            if tk == "," and d == 0:
                args.append(cur)
                cur = []
            else:
                cur.append(tk)
            j += 1
        args.append(cur)
        binding = dict(zip(mac.params, args))
        body, btoks = [], tokenize(mac.body)
        k = 0
        while k < len(btoks):
            bt = btoks[k]
            if bt == "#" and k + 1 < len(btoks) and btoks[k + 1] in binding and not (body and body[-1] == "#"):
                text = " ".join(binding[btoks[k + 1]]).replace("\\", "\\\\").replace('"', '\\"')
                body.append(f'"{text}"')
                k += 2
                continue
            body.extend(binding.get(bt, [bt]))
            k += 1
        out.extend(_paste(body, t))
        i = j + 1
        changed = True
    return expand_macros(out, macros, depth + 1) if changed else out


# AST: tuples ("kind", ...). Expressions and statements alike.
_SCALAR_WORDS = {"int", "unsigned", "signed", "long", "short", "char", "float", "double", "bool", "void",
                 "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "int16_t", "uint8_t", "int8_t",
                 "auto", "dim3", "cudaError_t", "cudaStream_t", "half", "__half", "__nv_bfloat16", "float4",
                 "float2", "scalar_t", "ptrdiff_t", "uint16_t"}
_QUALIFIERS = {"const", "constexpr", "static", "volatile", "register", "inline", "__restrict__", "__restrict"}
_TEMPLATE_FUNCS = {"data_ptr", "mutable_data_ptr", "const_data_ptr", "static_cast", "reinterpret_cast",
                   "const_cast", "numeric_limits", "item", "vector", "tuple", "make_tuple", "min", "max",
                   "accessor", "packed_accessor32", "packed_accessor64", "get"}


# Words that open a construct the interpreter does not take, and what it is.
_REFUSED_WORDS = {
    "asm": "inline assembly in host code", "__asm__": "inline assembly in host code",
    "__asm": "inline assembly in host code", "thread_local": "a thread_local variable",
    "extern": "an extern declaration in host code", "goto": "goto", "try": "try/catch in host code",
    "new": "new in host code", "delete": "delete in host code", "typedef": "a typedef inside a host function",
    "struct": "a struct inside a host function", "class": "a class inside a host function",
    "union": "a union inside a host function", "enum": "an enum inside a host function",
    "template": "a template inside a host function", "namespace": "a namespace inside a host function",
    "__attribute__": "an __attribute__ in host code",
    "operator": "an operator definition in host code",
}


_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_KEYWORDS = {"return", "throw", "case", "default", "else", "if", "for", "while", "do", "switch", "break",
             "continue", "goto", "new", "delete", "sizeof", "using", "typedef", "operator", "co_return", "co_yield",
             "co_await", "static_assert"} | set(_REFUSED_WORDS)


class Parser:
    def __init__(self, toks: list[str], kernels: set[str], types: set[str]):
        self.t, self.i, self.kernels, self.types = toks, 0, kernels, types
        self.quals: frozenset = frozenset()

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.t[j] if j < len(self.t) else ""

    def next(self) -> str:
        tok = self.peek()
        if not tok:
            raise Unsupported("host code ends early")
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise Unsupported(f"expected {tok!r}, found {got!r} in host code")

    # -- types ---------------------------------------------------------------------------
    def _qualified_name(self) -> str:
        parts = [self.next()]
        while self.peek() == "::":
            self.next()
            parts.append(self.next())
        return "::".join(parts)

    def is_type_start(self) -> bool:
        j = self.i
        while self.t[j:j + 1] and self.t[j] in _QUALIFIERS:
            j += 1
        tok = self.t[j] if j < len(self.t) else ""
        if tok in _SCALAR_WORDS or tok in self.types:
            return True
        if tok in ("torch", "at", "c10", "std", "cuda") and j + 2 < len(self.t) and self.t[j + 1] == "::":
            # torch::Tensor x / at::cuda::CUDAStream s / std::vector<...> v: a type followed by a name
            k = j
            while k + 2 < len(self.t) and self.t[k + 1] == "::":
                k += 2
            name = self.t[k]
            after = self.t[k + 1] if k + 1 < len(self.t) else ""
            if after == "<":
                return name in ("vector", "tuple", "optional", "array", "pair")
            return bool(name[:1].isupper()) and after not in ("(", "::", ".", ";", ")", ",") or \
                name in ("IntArrayRef", "Tensor", "TensorOptions", "ScalarType", "Device", "CUDAStream",
                         "OptionalCUDAGuard", "CUDAGuard", "Scalar") or _IDENT.match(after) is not None
        # `Name name`, `ns::Name name`: a declaration of a type the parser does not know (HostCheck judges it)
        k = j
        while k + 2 < len(self.t) and self.t[k + 1] == "::" and _IDENT.match(self.t[k]):
            k += 2
        nxt = self.t[k + 1] if k + 1 < len(self.t) else ""
        return bool(_IDENT.match(tok) and _IDENT.match(self.t[k]) and _IDENT.match(nxt)) and \
            tok not in _KEYWORDS and nxt not in _KEYWORDS

    def parse_type(self) -> str:
        """A type, as text without cv-qualifiers; `self.quals` says what the declared object is:
        const (the object itself, not a pointee), static, constexpr, ref."""
        quals: set[str] = set()
        while self.peek() in _QUALIFIERS:
            w = self.next()
            quals.add(w)
            if w == "constexpr":
                quals.add("const")
        base = []
        while True:
            tok = self.peek()
            if tok in ("unsigned", "signed", "long", "short", "int", "char") and (not base or base[-1] in (
                    "unsigned", "signed", "long", "short")):
                base.append(self.next())
                continue
            if tok == "const" and base:      # `int const x`
                self.next()
                quals.add("const")
                continue
            if base:
                break
            base.append(self._qualified_name())
            if self.peek() == "<":
                base.append(self._template_text())
            break
        ctype = " ".join(base).replace(" <", "<")
        while self.peek() in ("*", "&", "&&", "const", "__restrict__", "__restrict"):
            tok = self.next()
            if tok == "*":
                ctype += "*"
                quals.discard("const")     # `const float* p`: the pointee is const, p is not
            elif tok in ("&", "&&"):
                ctype += "&"
                quals.add("ref")
            elif tok == "const":
                quals.add("const")         # `float* const p`
        self.quals = frozenset(quals)
        return ctype

    def _template_text(self) -> str:
        """`<...>` as text, nested brackets included."""
        self.expect("<")
        depth, parts = 1, []
        while True:
            tok = self.next()
            if tok == "<":
                depth += 1
            elif tok == ">":
                depth -= 1
            elif tok == ">>":
                depth -= 2
                if depth <= 0:
                    if depth < 0:
                        self.i -= 1
                        self.t[self.i] = ">"
                    break
            if depth == 0:
                break
            parts.append(tok)
        text = re.sub(r"\s*::\s*", "::", " ".join(parts))
        return "<" + re.sub(r"\s+([*&])", r"\1", text) + ">"

    # -- statements ----------------------------------------------------------------------
    def parse_block(self) -> tuple:
        self.expect("{")
        body = []
        while self.peek() != "}":
            body.append(self.statement())
        self.expect("}")
        return ("block", body)

    def statement(self) -> tuple:
        tok = self.peek()
        if tok == "{":
            return self.parse_block()
        if tok == ";":
            self.next()
            return ("block", [])
        if tok == "if":
            self.next()
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            then = self.statement()
            other = None
            if self.peek() == "else":
                self.next()
                other = self.statement()
            return ("if", cond, then, other)
        if tok == "for":
            self.next()
            self.expect("(")
            init = self.statement() if self.peek() != ";" else (self.next() and ("block", []))
            cond = self.expr() if self.peek() != ";" else ("num", 1, "int")
            self.expect(";")
            step = self.expr() if self.peek() != ")" else None
            self.expect(")")
            return ("for", init, cond, step, self.statement())
        if tok == "while":
            self.next()
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            return ("for", ("block", []), cond, None, self.statement())
        if tok == "do":
            self.next()
            body = self.statement()
            self.expect("while")
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            self.expect(";")
            return ("do", body, cond)
        if tok == "return":
            self.next()
            value = None if self.peek() == ";" else self.expr()
            self.expect(";")
            return ("return", value)
        if tok in ("break", "continue"):
            self.next()
            self.expect(";")
            return (tok,)
        if tok == "throw":
            self.next()
            value = self.expr()
            self.expect(";")
            return ("throw", value)
        if tok == "switch":
            self.next()
            self.expect("(")
            value = self.expr()
            self.expect(")")
            self.expect("{")
            cases: list = []   # (label expression or None for default, statements); control falls through
            while self.peek() != "}":
                if self.peek() == "case":
                    self.next()
                    label = self.ternary()
                    self.expect(":")
                    cases.append((label, []))
                elif self.peek() == "default":
                    self.next()
                    self.expect(":")
                    cases.append((None, []))
                elif not cases:
                    raise Unsupported("a statement before the first case")
                else:
                    cases[-1][1].append(self.statement())
            self.expect("}")
            return ("switch", value, cases)
        if tok == "using":
            while self.next() != ";":
                pass
            return ("block", [])
        if tok in _REFUSED_WORDS:
            raise Unsupported(_REFUSED_WORDS[tok])
        if tok.startswith("AT_DISPATCH_"):
            return self.dispatch()
        if self.is_type_start():
            return self.declaration()
        e = self.expr()
        self.expect(";")
        return ("expr", e)

    def declaration(self) -> tuple:
        ctype = self.parse_type()
        quals = self.quals
        decls = []
        while True:
            extra = ""
            while self.peek() in ("*", "&"):
                extra += "*" if self.next() == "*" else "&"
            name = self.next()
            if not re.match(r"^[A-Za-z_]\w*$", name):
                raise Unsupported(f"cannot read the declaration of {name!r}")
            init: Any = None
            if self.peek() == "=":
                self.next()
                init = ("init", self.assign_expr())
            elif self.peek() == "(":
                self.next()
                init = ("ctor", self.args(")"))
            elif self.peek() == "{":
                self.next()
                init = ("brace", self.args("}"))
            elif self.peek() == "[":
                raise Unsupported(f"the array {name} in host code")
            q = quals | ({"ref"} if "&" in extra else set())
            decls.append(("decl", ctype + extra, name, init, q - ({"const"} if "*" in extra else set())))
            if self.peek() == ",":
                self.next()
                continue
            break
        self.expect(";")
        return decls[0] if len(decls) == 1 else ("block", decls, "flat")

    def dispatch(self) -> tuple:
        macro = self.next()
        self.expect("(")
        args = []
        while True:
            if self.peek() in ("[", "(") and (self.peek() == "[" or self.peek(1) == "["):
                parens = 0
                while self.peek() == "(":
                    self.next()
                    parens += 1
                self.expect("[")
                while self.next() != "]":
                    pass
                if self.peek() == "(":
                    self.next()
                    self.expect(")")
                body = self.parse_block()
                for _ in range(parens):
                    self.expect(")")
                args.append(("lambda", body))
            else:
                args.append(self.assign_expr())
            if self.peek() == ",":
                self.next()
                continue
            break
        self.expect(")")
        if self.peek() == ";":
            self.next()
        return ("dispatch", macro, args)

    # -- expressions ---------------------------------------------------------------------
    def args(self, close: str) -> list:
        out = []
        while self.peek() != close:
            out.append(self.assign_expr())
            if self.peek() == ",":
                self.next()
        self.expect(close)
        return out

    def expr(self) -> tuple:
        e = self.assign_expr()
        while self.peek() == ",":
            self.next()
            e = ("comma", e, self.assign_expr())
        return e

    def assign_expr(self) -> tuple:
        left = self.ternary()
        tok = self.peek()
        if tok in ("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="):
            self.next()
            return ("assign", tok, left, self.assign_expr())
        return left

    def ternary(self) -> tuple:
        cond = self.binary(0)
        if self.peek() == "?":
            self.next()
            a = self.assign_expr()
            self.expect(":")
            b = self.assign_expr()
            return ("ternary", cond, a, b)
        return cond

    _PREC = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
             ("+", "-"), ("*", "/", "%")]

    def binary(self, level: int) -> tuple:
        if level == len(self._PREC):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._PREC[level]:
            op = self.next()
            left = ("bin", op, left, self.binary(level + 1))
        return left

    def unary(self) -> tuple:
        tok = self.peek()
        if tok in ("-", "+", "!", "~"):
            self.next()
            return ("unary", tok, self.unary())
        if tok in ("++", "--"):
            self.next()
            return ("incr", tok, self.unary(), True)
        if tok == "*":
            raise Unsupported("pointer dereference in host code")
        if tok == "&":
            self.next()
            return ("addr", self.unary())
        if tok == "sizeof":
            self.next()
            self.expect("(")
            ctype = self.parse_type() if self.is_type_start() else None
            if ctype is None:
                raise Unsupported("sizeof of an expression")
            self.expect(")")
            return ("sizeof", ctype)
        if tok == "(" and self._cast_ahead():
            self.next()
            ctype = self.parse_type()
            self.expect(")")
            return ("cast", ctype, self.unary())
        return self.postfix(self.primary())

    def _cast_ahead(self) -> bool:
        save = self.i
        try:
            self.i += 1
            if not self.is_type_start():
                return False
            self.parse_type()
            return self.peek() == ")"
        except Unsupported:
            return False
        finally:
            self.i = save

    def primary(self) -> tuple:
        tok = self.next()
        if tok == "(":
            e = self.expr()
            self.expect(")")
            return e
        if tok == "{":
            return ("list", self.args("}"))
        if tok.startswith('"'):
            s = _unescape(tok[1:-1])
            while self.peek().startswith('"'):
                s += _unescape(self.next()[1:-1])
            return ("str", s)
        if tok.startswith("'"):
            return ("num", ord(_unescape(tok[1:-1])), "char")
        if re.match(r"^[\d.]", tok):
            return _number(tok)
        if tok == "[":
            raise Unsupported("a lambda outside AT_DISPATCH")
        if tok in _REFUSED_WORDS:
            raise Unsupported(_REFUSED_WORDS[tok])
        if not re.match(r"^[A-Za-z_]\w*$", tok):
            raise Unsupported(f"unexpected {tok!r} in host code")
        name = tok
        while self.peek() == "::":
            self.next()
            name += "::" + self.next()
        targs = None
        last = name.split("::")[-1]
        if self.peek() == "<" and (name in self.kernels or last in _TEMPLATE_FUNCS):
            targs = self._template_text()
        if self.peek() == "<<<":
            self.next()
            config = []
            while True:
                config.append(self.ternary())
                if self.peek() == ",":
                    self.next()
                    continue
                break
            self.expect(">>>")
            self.expect("(")
            return ("launch", name, targs, config, self.args(")"))
        return ("name", name, targs)

    def postfix(self, e: tuple) -> tuple:
        while True:
            tok = self.peek()
            if tok == "(":
                self.next()
                e = ("call", e, self.args(")"))
            elif tok in (".", "->"):
                self.next()
                member = self.next()
                targs = self._template_text() if self.peek() == "<" and member in _TEMPLATE_FUNCS else None
                e = ("member", e, member, targs)
            elif tok == "[":
                self.next()
                idx = self.expr()
                self.expect("]")
                e = ("index", e, idx)
            elif tok in ("++", "--"):
                self.next()
                e = ("incr", tok, e, False)
            elif tok == "{" and e[0] == "name":
                self.next()
                e = ("call", e, self.args("}"))
            else:
                return e


def _unescape(s: str) -> str:
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _number(tok: str) -> tuple:
    """A literal's value and C++ type: the first of the types its suffix and base allow that holds it
    (decimal: int, long, long long; hex, octal and binary also the unsigned ones)."""
    low = tok.lower().replace("'", "")
    m = re.match(r"^(0x[0-9a-f]+|0b[01]+|0[0-7]*|[1-9]\d*)(u?l{0,2}|l{0,2}u?)$", low)
    if not m:
        digits = re.match(r"^[\d.]+(?:e[+-]?\d+)?", low).group(0)
        suffix = low[len(digits):]
        if suffix not in ("", "f", "l") or not re.search(r"[.e]", digits):
            raise Unsupported(f"the literal {tok}")
        return ("num", float(digits), "float" if suffix == "f" else "double")
    digits, suffix = m.groups()
    base = 16 if digits.startswith("0x") else 2 if digits.startswith("0b") else 8 if digits.startswith("0") else 10
    v = int(digits[2:] if base in (16, 2) else digits, base)
    unsigned, longs = "u" in suffix, suffix.count("l")
    order = ["int32", "uint32", "int64", "uint64", "llong", "ullong"][{0: 0, 1: 2, 2: 4}[longs]:]
    if unsigned:
        order = [t for t in order if t.startswith("u")]
    elif base == 10:
        order = [t for t in order if not t.startswith("u")]
    for t in order:
        bits, signed = _INT_TYPES[t]
        if v < (1 << (bits - 1) if signed else 1 << bits):
            return ("num", v, t)
    raise Unsupported(f"the literal {tok}, too large for any integer type")


# ---------------------------------------------------------------------------------------
# values


# C++'s integer types on x86-64 Linux (LP64): int64_t is long, long long is another type of the
# same width (std::min(int64_t, long long) does not deduce), size_t and uint64_t are unsigned long.
_INT_TYPES = {"int32": (32, True), "uint32": (32, False), "int64": (64, True), "uint64": (64, False),
              "llong": (64, True), "ullong": (64, False), "bool": (8, False), "char": (8, True),
              "int16": (16, True), "uint16": (16, False), "uint8": (8, False), "int8": (8, True)}
_CTYPE_NUM = {"int": "int32", "signed": "int32", "signed int": "int32", "int32_t": "int32", "unsigned": "uint32",
              "unsigned int": "uint32", "uint32_t": "uint32", "long": "int64", "long int": "int64",
              "signed long": "int64", "int64_t": "int64", "ptrdiff_t": "int64", "intptr_t": "int64",
              "long long": "llong", "long long int": "llong", "signed long long": "llong",
              "unsigned long": "uint64", "unsigned long int": "uint64", "size_t": "uint64", "uint64_t": "uint64",
              "uintptr_t": "uint64", "unsigned long long": "ullong", "unsigned long long int": "ullong",
              "short": "int16", "short int": "int16", "signed short": "int16", "int16_t": "int16",
              "unsigned short": "uint16", "unsigned short int": "uint16", "uint16_t": "uint16", "char": "char",
              "signed char": "int8", "int8_t": "int8", "uint8_t": "uint8", "unsigned char": "uint8", "bool": "bool",
              "float": "float", "double": "double"}
# integer conversion rank (bool < char < short < int < long < long long)
_RANK = {"bool": 1, "char": 2, "int8": 2, "uint8": 2, "int16": 3, "uint16": 3, "int32": 4, "uint32": 4,
         "int64": 5, "uint64": 5, "llong": 6, "ullong": 6, "float": 7, "double": 8}
_UNSIGNED = {"int32": "uint32", "int64": "uint64", "llong": "ullong"}
# the types' names as nvcc and g++ print them in an error
_CNAME = {"int32": "int", "uint32": "unsigned int", "int64": "long", "uint64": "unsigned long", "llong": "long long",
          "ullong": "unsigned long long", "bool": "bool", "char": "char", "int16": "short", "uint16": "unsigned short",
          "uint8": "unsigned char", "int8": "signed char", "float": "float", "double": "double"}


@dataclass
class Num:
    v: Any
    t: str     # int32 uint32 int64 uint64 llong ullong bool char ... float double

    def __post_init__(self):
        self.v = _fit(self.v, self.t)


def _fit(v, t: str):
    if t == "float":
        return float(np.float32(v))
    if t == "double":
        return float(v)
    if t == "bool":
        return 1 if v else 0      # before truncation: 0.5 is true
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise CudaRuntimeError("conversion of NaN or infinity to an integer")
        v = int(v)  # C truncates toward zero
    bits, signed = _INT_TYPES[t]
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _promoted(t: str) -> str:
    """Integral promotion: what is narrower than int computes as int."""
    return "int32" if _RANK[t] < _RANK["int32"] else t


def _common(a: str, b: str) -> str:
    """The usual arithmetic conversions."""
    if "double" in (a, b):
        return "double"
    if "float" in (a, b):
        return "float"
    a, b = _promoted(a), _promoted(b)
    if a == b:
        return a
    sa, sb = _INT_TYPES[a][1], _INT_TYPES[b][1]
    if sa == sb:
        return a if _RANK[a] > _RANK[b] else b
    signed, unsigned = (a, b) if sa else (b, a)
    if _RANK[unsigned] >= _RANK[signed]:
        return unsigned
    if _INT_TYPES[signed][0] > _INT_TYPES[unsigned][0]:
        return signed
    return _UNSIGNED[signed]


@dataclass
class Ptr:
    addr: int
    ctype: str       # the pointee type, e.g. float, __nv_bfloat16, void


@dataclass
class Dim3:
    x: int = 1
    y: int = 1
    z: int = 1


@dataclass
class Stream:
    ptr: int | None    # None: torch's current stream, read at launch


@dataclass
class Options:
    dtype: Any = None
    device: Any = None

    def merged(self, other: "Options") -> "Options":
        return Options(other.dtype or self.dtype, other.device or self.device)


@dataclass
class _Iter:
    seq: list
    at: int


@dataclass
class Kernel:
    name: str
    template: list[tuple[str, str]]   # (kind "typename" | "value", name)
    params: list[nvrtc.Param]


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_CUDA_ERRORS = {0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
                9: "cudaErrorInvalidConfiguration", 98: "cudaErrorInvalidDeviceFunction",
                700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources"}
_ELEMENT = {"float": 4, "double": 8, "int": 4, "int32_t": 4, "int64_t": 8, "long": 8, "long long": 8, "half": 2,
            "__half": 2, "at::Half": 2, "c10::Half": 2, "__nv_bfloat16": 2, "at::BFloat16": 2, "c10::BFloat16": 2,
            "unsigned char": 1, "uint8_t": 1, "int8_t": 1, "char": 1, "bool": 1, "short": 2, "int16_t": 2,
            "unsigned int": 4, "uint32_t": 4, "size_t": 8, "uint64_t": 8, "float2": 8, "float4": 16,
            "half2": 4, "__half2": 4, "__nv_bfloat162": 4, "double2": 16, "int2": 8, "int4": 16, "void": 1}


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
        cuda_nc = _strip_comments(cuda)
        cpp_nc = _strip_comments(cpp)
        cuda_code, macros = _directives(cuda_nc)
        cpp_code, cpp_macros = _directives(cpp_nc)
        self.macros = {**_HOST_MACROS, **cpp_macros, **macros}
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
        for code, fns in ((cpp_code, cpp_tops), (cuda_code, tops)):
            self._read_constants(code, fns)
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

    def _read_constants(self, code: str, fns: list[TopFunction]) -> None:
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
                toks = expand_macros(tokenize(m.group(3)), self.macros)
                node = Parser(toks, set(), set()).expr()
                if not _constant_expr(node, self.globals):
                    continue   # a dynamic initializer: not read, so a use of it is refused by name
                value = Interpreter(self).convert(m.group(1), Interpreter(self).eval(node, [self.globals]))
                for key in (m.group(2), *(f"{ns}::{m.group(2)}" for ns in _namespaces_at(code, m.start(2)))):
                    self.globals[key] = value
            except (Unsupported, CudaRuntimeError, KeyError, IndexError):
                continue  # a constant the host code cannot use; reading it would be Unsupported

    def _parse_function(self, f: TopFunction) -> tuple:
        toks = expand_macros(tokenize(f.body), self.macros)
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
        ret = " ".join(t for t in expand_macros(tokenize(f.ret), self.macros)
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
            if len(args) != 3 or args[2][0] != "lambda":
                raise Unsupported(f"{macro} not of the form {macro}(type, \"name\", [&] {{...}})")
            self.expr(args[0], scopes)
            self.expr(args[1], scopes)
            self.stmt(args[2][1], scopes + [{"scalar_t": _Var("type", True)}])
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


def _dispatch_types(macro: str) -> list[str]:
    types = ["float", "double"]
    if "HALF" in macro:
        types.append("at::Half")
    if "BFLOAT16" in macro or "AND2" in macro:
        types.append("at::BFloat16")
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
        if len(args) != 3 or args[2][0] != "lambda":
            raise Unsupported(f"{macro} form")
        st = self.eval(args[0], scopes)
        if isinstance(st, torch.Tensor):
            st = st.dtype
        table = {torch.float32: "float", torch.float64: "double", torch.float16: "at::Half",
                 torch.bfloat16: "at::BFloat16"}
        ctype = table.get(st)
        if ctype not in _dispatch_types(macro):
            raise RuntimeError(f"\"{self.eval(args[1], scopes)}\" not implemented for '{_dtype_name(st)}'")
        if ctype not in ("float", "double"):
            raise Unsupported(f"{macro} on {ctype}")
        self.run(args[2][1], scopes + [{"scalar_t": ("type", ctype)}])

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

    def _text(self, v) -> str:
        if isinstance(v, Num):
            return str(v.v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self._text(x) for x in v) + "]"
        return str(v)

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
                opt.dtype = args[0]
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
                setattr(new, member, args[0] if member == "dtype" else self._device(args[0]))
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
            vals = [a.v if isinstance(a, Num) else a for a in args]
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


def _copy(v):
    """A value as C++ copies it into a new variable (dim3 and std::vector are values, not references)."""
    if isinstance(v, Dim3):
        return Dim3(v.x, v.y, v.z)
    if isinstance(v, list):
        return list(v)
    return v


def _dim3(vals) -> Dim3:
    if not 1 <= len(vals) <= 3 or not all(isinstance(v, Num) for v in vals):
        raise Unsupported("dim3 arguments")
    xs = [Num(v.v, "uint32").v for v in vals] + [1, 1]
    return Dim3(*xs[:3])


def _scalar(v):
    if isinstance(v, Num):
        return v.v
    if isinstance(v, (int, float)):
        return v
    raise Unsupported("a fill value that is not a number")


def _dtype_name(dt) -> str:
    names = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
             "int64": "Long", "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short"}
    return names.get(str(dt).replace("torch.", ""), str(dt))


def kernel_names(cuda_sources) -> set[str]:
    """The `__global__` function names of load_inline CUDA sources (the judge's own-kernel list)."""
    try:
        text = _strip_comments(_joined(cuda_sources))
    except TypeError:
        return set()
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", text)
    return {m.group(1) for m in re.finditer(r"__global__[^;{(]*?\b(\w+)\s*\(", text)}


def _joined(src) -> str:
    if src is None:
        return ""
    if isinstance(src, (list, tuple)):
        return "\n".join(str(s) for s in src)
    if not isinstance(src, str):
        raise TypeError("load_inline: sources must be a string or a list of strings")
    return src


def translate(name: str, cpp_sources, cuda_sources=None, functions=None, extra_cuda_cflags=None,
              gpu: bool = True) -> FastInlineModule:
    """The fast module for these load_inline arguments. Raises Unsupported (a compile_error naming the
    construct) when its host code is outside the interpreter's subset, BuildError where nvcc or g++ would
    refuse it, CudaCompileError when NVRTC rejects the device code."""
    try:
        cuda = _joined(cuda_sources)
        if not cuda.strip():
            raise Unsupported("no CUDA sources (a C++-only extension: nothing would run on the GPU)")
        flags = list(extra_cuda_cflags or [])
        program = Program(str(name), _joined(cpp_sources), cuda, functions, flags, gpu)
    except Unsupported as e:
        raise e.named(str(name)) from None
    fns = {py: HostFunction(program, c, py) for py, c in program.exported.items()}
    return FastInlineModule(str(name), fns, list(program.kernels), gpu)


def load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                no_implicit_headers=False, *, gpu: bool = True):
    """`torch.utils.cpp_extension.load_inline`'s signature, taken by the fast path, which is the only way a
    candidate's extension is built: what it cannot take is the candidate's compile_error (Unsupported, naming
    the construct), never a native build. Without a GPU the device code is still compiled and the host code
    checked, for feedback; calling the module says that running it needs the gpu backend."""
    def given(flags):  # KernelBench's own example passes extra_cflags=[""], extra_ldflags=[""]
        return [f for f in ([flags] if isinstance(flags, str) else list(flags or [])) if str(f).strip()]
    refused = None
    if sycl_sources or given(extra_sycl_cflags):
        refused = "SYCL sources"
    elif given(extra_include_paths):
        refused = f"extra_include_paths {given(extra_include_paths)} (the device code sees torch's and CUDA's headers)"
    elif given(extra_ldflags):
        refused = f"extra_ldflags {given(extra_ldflags)} (no library is linked into the host code)"
    elif not is_python_module:
        refused = "is_python_module=False (the extension must be a Python module of host functions)"
    elif any(str(f).startswith(("-D", "-U", "-include")) for f in given(extra_cflags)):
        refused = f"host compiler defines {given(extra_cflags)} (extra_cflags; #define them in the source)"
    if refused:
        raise Unsupported(f"load_inline with {refused}").named(str(name))
    try:
        return translate(name, cpp_sources, cuda_sources, functions, given(extra_cuda_cflags), gpu)
    except (Unsupported, BuildError):
        raise
    except nvrtc.CudaCompileError as e:
        raise nvrtc.CudaCompileError(
            f"{e.log}\n(the judge compiles load_inline device code with NVRTC, with torch's nvcc defines and "
            "stand-in headers for torch's; host code is interpreted, so the device code may include only what "
            "NVRTC and CUDA's own headers provide)", f"{name}.cu") from None
