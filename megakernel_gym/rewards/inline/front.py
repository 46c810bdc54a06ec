"""load_inline's front: the device sources compiled by NVRTC with name expressions for their kernels,
the host sources checked and parsed, and the module returned (translate for a whole answer).
"""
from __future__ import annotations



from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards.inline.interpret import HostFunction
from megakernel_gym.rewards.inline.preprocess import _joined
from megakernel_gym.rewards.inline.program import FastInlineModule, Program
from megakernel_gym.rewards.inline.subset import BuildError, Unsupported


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
