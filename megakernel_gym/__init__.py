"""megakernel-gym: an RL environment for writing fast, correct GPU kernels.

Candidates import `load_cuda` from here to compile CUDA C through NVRTC.
"""
from megakernel_gym.rewards.nvrtc import CudaCompileError, CudaUnavailableError, load_cuda

from megakernel_gym.env.registration import register_envs as _register_envs

_register_envs()   # gymnasium.make("MegaKernel-v0") after `import megakernel_gym`

__version__ = "0.1.0"
__all__ = ["load_cuda", "CudaCompileError", "CudaUnavailableError", "__version__"]
