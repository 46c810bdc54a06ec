"""The interpreter's values: C++ numbers with their widths and promotions (Num), pointers, dim3,
streams, tensor options, kernels, and the exceptions that carry return, break and continue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards.inline.subset import CudaRuntimeError, Unsupported


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
