"""megakernel-gym: an RL environment for writing fast, correct GPU kernels.

Candidates import `load_cuda` from here to compile CUDA C through NVRTC.
"""
from megakernel_gym.rewards.nvrtc import CudaCompileError, CudaUnavailableError, load_cuda

from _megakernel_gym_gymnasium import install as _install_gym_registration

# gymnasium.make("MegaKernel-v0") after `import megakernel_gym`: registered now if gymnasium is
# loaded, else the moment it is (importing gymnasium here would cost every judge worker 0.2 s)
_install_gym_registration()

__version__ = "0.1.0"
__all__ = ["load_cuda", "CudaCompileError", "CudaUnavailableError", "__version__"]
