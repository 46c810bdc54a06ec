"""Registering MegaKernel-v0 with Gymnasium: the one definition lives in the top-level module
_megakernel_gym_gymnasium (shipped beside the package so its .pth can register without
importing megakernel_gym)."""
from _megakernel_gym_gymnasium import ENV_ID, register_envs

__all__ = ["ENV_ID", "register_envs"]
