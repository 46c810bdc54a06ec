"""What NVRTC compiles a candidate's device code with: torch's nvcc defines, and the stub headers that
stand in for torch's and the C++ standard library's (no CUDA or torch header is needed).
"""
from __future__ import annotations

import re




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
