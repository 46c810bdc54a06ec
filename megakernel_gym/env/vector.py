"""Many MegaKernel-v0 episodes at once: a Gymnasium VectorEnv whose kernels are judged together.

    envs = gym.make_vec("MegaKernel-v0", num_envs=8, vectorization_mode="vector_entry_point", backend="gpu")

Each step, every sub-env reads its action; the kernels among them go to one judge pool
(`pool=`: "local", the default, four judges per GPU or one per CPU core; "ray", actors on a
Ray cluster; or a pool object) as a single batch, so N episodes cost
about one evaluation's latency per batch of pool size, not N. IR edits are scored in this
process. Sub-envs autoreset on the step after they end (Gymnasium's next-step autoreset): that
step's action is ignored and the new episode's first observation comes back with reward 0.
Observations are a dict of tuples of strings (one per sub-env); infos follow Gymnasium's
vector layout (arrays per key, `_key` masks).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from megakernel_gym.env.megakernel import MegaKernelEnv, judge_pending, pool_kind


class MegaKernelVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 2, backend: str | None = None, pool=None, curriculum=None, suite=None,
                 reward: str = "improvement", **env_kw):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        first = MegaKernelEnv(backend=backend, curriculum=curriculum, suite=suite, reward=reward, **env_kw)
        # one curriculum for all sub-envs: what one episode teaches the sampler, all of them see
        self.envs = [first] + [MegaKernelEnv(backend=first.backend, curriculum=first.curriculum, reward=reward,
                                             **env_kw) for _ in range(num_envs - 1)]
        self.num_envs = num_envs
        self.backend = first.backend
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        # a pool object is the caller's (never closed here); a name ("local", "ray") makes one on first use
        self._pool_kind = pool_kind(pool)
        self._pool = None if isinstance(pool, str) else pool
        self._own_pool = self._pool is None
        self._autoreset = np.zeros(num_envs, dtype=bool)

    @property
    def pool(self):
        if self._pool is None and self.backend != "sim":
            from megakernel_gym.rewards import make_pool
            n = None if self.backend == "gpu" else min(self.num_envs, 8)
            self._pool = make_pool(self._pool_kind, self.backend, num_workers=n, store=None)
        return self._pool

    def _batch(self, observations: list[dict]) -> dict[str, tuple]:
        return {k: tuple(o[k] for o in observations) for k in self.single_observation_space.spaces}

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        super().reset(seed=seed if isinstance(seed, int) or seed is None else None)
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        obs, infos = [], {}
        for i, (env, s) in enumerate(zip(self.envs, seeds)):
            o, info = env.reset(seed=s, options=options)
            obs.append(o)
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        return self._batch(obs), infos

    def step(self, actions):
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        n = self.num_envs
        obs: list[Any] = [None] * n
        rewards = np.zeros(n, dtype=np.float64)
        terms, truncs = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        pendings = {}
        for i, (env, a) in enumerate(zip(self.envs, actions)):
            if self._autoreset[i]:
                obs[i], info = env.reset()
                infos = self._add_info(infos, info, i)
                continue
            pendings[i] = env.begin_step(a)
        results = judge_pending(pendings, lambda: self.pool)
        for i, p in pendings.items():
            obs[i], rewards[i], terms[i], truncs[i], info = self.envs[i].end_step(p, results[i])
            infos = self._add_info(infos, info, i)
        self._autoreset = terms | truncs
        return self._batch(obs), rewards, terms, truncs, infos

    def close_extras(self, **kwargs):
        for env in self.envs:
            env.close()
        if self._own_pool and self._pool is not None:
            self._pool.close()
            self._pool = None
