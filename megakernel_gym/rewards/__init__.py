"""The judge: sandboxed workers, correctness, timing, anti-cheat, rewards, results store, pools."""
from megakernel_gym.rewards.judge import GPUUnavailableError, Judge, evaluate, resolve_backend
from megakernel_gym.rewards.pool import POOLS, LocalPool, Pool, make_pool
from megakernel_gym.rewards.ray_pool import RayPool, RayPoolError
from megakernel_gym.rewards.problem import Candidate, CandidateError, Problem, ProblemError, ProblemUnservable
from megakernel_gym.rewards.result import STATUSES, EvalResult, Flag
from megakernel_gym.rewards.reward_fns import (REWARD_FUNCTIONS, fast_p, gated_log_speedup, kevin_reward,
                                               milestone_reward)
from megakernel_gym.rewards.store import ResultsStore

__all__ = ["Judge", "evaluate", "resolve_backend", "GPUUnavailableError", "LocalPool", "Pool", "POOLS", "make_pool",
           "RayPool", "RayPoolError", "Candidate",
           "CandidateError", "Problem", "ProblemError", "ProblemUnservable", "EvalResult", "Flag", "STATUSES", "ResultsStore",
           "REWARD_FUNCTIONS", "fast_p", "gated_log_speedup", "kevin_reward", "milestone_reward"]
