"""megakernel-gym: an RL environment for writing fast, correct GPU kernels.

Candidates import `load_cuda` from here to compile CUDA C through NVRTC.
"""
from megakernel_gym.cuda.nvrtc import CudaCompileError, CudaUnavailableError, load_cuda

from _megakernel_gym_gymnasium import install as _install_gym_registration

# gymnasium.make("MegaKernel-v0") after `import megakernel_gym`: registered now if gymnasium is
# loaded, else the moment it is (importing gymnasium here would cost every judge worker 0.2 s)
_install_gym_registration()

__version__ = "0.1.0"
__all__ = ["load_cuda", "load_kernel", "CudaCompileError", "CudaUnavailableError", "__version__"]


def __getattr__(name: str):
    if name == "load_kernel":   # an exported kernel as a drop-in module (policies/export.py), imported on use
        from megakernel_gym.policies.export import load_kernel
        return load_kernel
    raise AttributeError(f"module 'megakernel_gym' has no attribute {name!r}")
