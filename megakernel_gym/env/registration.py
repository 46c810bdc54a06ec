"""Registering MegaKernel-v0 with Gymnasium (cheap: the env module loads on gym.make)."""
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
