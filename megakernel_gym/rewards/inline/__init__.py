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

The package, in the order a candidate's load_inline runs through it:
    headers.py      torch's nvcc defines and the stub headers NVRTC compiles the device code with
    subset.py       the host C++ allowed, in words and name sets; the errors a build gets
    preprocess.py   comments, directives, macros, tokens, top-level functions, kernel names
    parse.py        Parser: host C++ tokens into the interpreter's tree
    values.py       the interpreter's values (C++ numbers, pointers, dim3, streams, kernels)
    check.py        HostCheck: what the interpreter refuses, before anything runs
    program.py      Program (a parsed translation unit) and FastInlineModule (what load_inline returns)
    interpret.py    the Interpreter and the host functions it runs
    front.py        load_inline and translate
"""
from __future__ import annotations

from megakernel_gym.cuda import nvrtc  # noqa: F401  (inline.nvrtc.CudaCompileError)
from megakernel_gym.rewards.inline.headers import (  # noqa: F401
    TORCH_NVCC_DEFINES, STUB_HEADERS,
)
from megakernel_gym.rewards.inline.subset import (  # noqa: F401
    FACTORIES, CHECKS, LIBRARY_CALLS, TENSOR_METADATA, TENSOR_VIEWS, TENSOR_COPIES,
    OTHER_MEMBERS, MEMBERS, GUARDS, DISPATCH_MACROS, SUPPORTED_HOST_SUBSET, Unsupported,
    CudaRuntimeError, BuildError, real_build,
)
from megakernel_gym.rewards.inline.preprocess import (  # noqa: F401
    Macro, TopFunction, top_level_functions, tokenize, expand_macros, kernel_names,
)
from megakernel_gym.rewards.inline.parse import (  # noqa: F401
    Parser,
)
from megakernel_gym.rewards.inline.values import (  # noqa: F401
    Num, Ptr, Dim3, Stream, Options, Kernel,
)
from megakernel_gym.rewards.inline.check import (  # noqa: F401
    minmax_type, HostCheck,
)
from megakernel_gym.rewards.inline.program import (  # noqa: F401
    FastInlineModule, Program,
)
from megakernel_gym.rewards.inline.interpret import (  # noqa: F401
    HostFunction, Interpreter, refuse_pointer,
)
from megakernel_gym.rewards.inline.front import (  # noqa: F401
    translate, load_inline,
)
