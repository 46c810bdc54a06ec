"""The host C++ the interpreter allows, in words (SUPPORTED_HOST_SUBSET) and as name sets (factories,
checks, library calls, tensor members), the errors a candidate's build gets, and torch's real build
(real_build: trusted code only).
"""
from __future__ import annotations

import re
from typing import Callable


from megakernel_gym.cuda import nvrtc


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
{", ".join(CHECKS)}, #define macros (no #if), AT_DISPATCH_FLOATING_TYPES[_AND_HALF](t, "name", [&] {{...}})
and AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "name", [&] {{...}}) (float and double run).
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
