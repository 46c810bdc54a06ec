"""The judge: sandboxed workers, correctness, timing, anti-cheat, rewards, results store, pools."""
from megakernel_gym.rewards.judge import GPUUnavailableError, Judge, evaluate, resolve_backend
from megakernel_gym.rewards.pool import LocalPool, Pool
from megakernel_gym.rewards.problem import Candidate, CandidateError, Problem, ProblemError
from megakernel_gym.rewards.result import STATUSES, EvalResult, Flag
from megakernel_gym.rewards.reward_fns import (REWARD_FUNCTIONS, fast_p, gated_log_speedup, kevin_reward,
                                               milestone_reward)
from megakernel_gym.rewards.store import ResultsStore

__all__ = ["Judge", "evaluate", "resolve_backend", "GPUUnavailableError", "LocalPool", "Pool", "Candidate",
           "CandidateError", "Problem", "ProblemError", "EvalResult", "Flag", "STATUSES", "ResultsStore",
           "REWARD_FUNCTIONS", "fast_p", "gated_log_speedup", "kevin_reward", "milestone_reward"]
