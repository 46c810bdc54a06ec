"""Gymnasium environments: MegaKernel-v0 (megakernel.py), its batched vector form (vector.py).

`import megakernel_gym` registers it; `gymnasium.make("megakernel_gym:MegaKernel-v0")` imports
and registers in one call (Gymnasium 1.x has no plugin entry points).
"""
from megakernel_gym.env.registration import ENV_ID, register_envs

register_envs()

__all__ = ["ENV_ID", "register_envs"]
