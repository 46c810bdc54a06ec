"""Registers MegaKernel-v0 with Gymnasium as soon as gymnasium is imported.

Gymnasium 1.x dropped plugin entry points, so `gymnasium.make("MegaKernel-v0")` with no other
import needs help: the installed `megakernel_gym-gymnasium.pth` imports this module at
interpreter start, and it waits (a meta path finder) for gymnasium to load, then registers.
It imports nothing else: the environment's own modules load on gymnasium.make.
"""
import sys

ENV_ID = "MegaKernel-v0"


def register_envs() -> bool:
    """Register once; False when gymnasium is not installed (the judge and compiler work without it)."""
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:
        return False
    if ENV_ID not in registry:
        # GPU timings vary run to run, so the same actions need not give the same rewards
        register(id=ENV_ID, entry_point="megakernel_gym.env.megakernel:MegaKernelEnv", nondeterministic=True,
                 vector_entry_point="megakernel_gym.env.vector:MegaKernelVectorEnv")
    return True


class _AfterGymnasium:
    """A meta path finder that lets gymnasium load as usual, then registers."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module):
                run(module)
                register_envs()
            loader.exec_module = exec_module
        return spec


def install() -> None:
    if "gymnasium" in sys.modules:
        register_envs()
    elif not any(isinstance(f, _AfterGymnasium) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasium())
