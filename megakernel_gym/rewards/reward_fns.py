"""Reward functions over an EvalResult, and fast_p for reports.

Failures are ordered: rejected and compile errors lowest, then crashes and timeouts, then
wrong answers, then any correct kernel. A rejected result never earns a positive reward.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from megakernel_gym.rewards.result import EvalResult

FAILURE_REWARD = -1.0
# not_run (code the backend compiled but could not run: impl bodies off the GPU) sits with the compile errors,
# at the env's floor, so that it never raises an episode's best: nothing was checked
_TIER = {"rejected": -1.0, "compile_error": -1.0, "not_run": -1.0, "timeout": -0.8, "runtime_error": -0.8,
         "incorrect": -0.5}


def gated_log_speedup(r: EvalResult, clip: tuple[float, float] = (-0.4, 3.0)) -> float:
    """Default reward: failure tiers, then ln(speedup vs the best baseline), clipped.

    The lower clip (-0.4) stays above the `incorrect` tier, so a correct kernel always
    beats a wrong one, however slow. With no speedup measured (cpu backend), correct = 0. A problem
    the backend cannot run at all (category "unservable", the same for every candidate) scores 0.
    """
    if r.category == "unservable":
        return 0.0
    if r.status != "correct":
        return _TIER.get(r.status, FAILURE_REWARD)
    return log_speedup_score(r.speedup, clip)


def log_speedup_score(speedup: float, clip: tuple[float, float] = (-0.4, 3.0)) -> float:
    """gated_log_speedup's score of a correct result with this speedup."""
    return float(min(max(math.log(speedup), clip[0]), clip[1])) if speedup and speedup > 0 else 0.0


EPISODE_REWARDS = ("improvement", "best", "score")

# How much faster (relative) than the episode's best so far a GPU-timed result must be before it is
# credited as the new best. Each timing is one draw of the GPU's noise and an episode's return keeps its
# best turn, so a kernel sent again with only its text changed (a comment, a renamed variable) drew its
# timing again for nothing: the best of twenty draws. The margins sit past each judge's run-to-run spread
# on an H200: ten evaluations of one op-level kernel 0.6-1.3% max over min (judge_repeatability.json),
# two builds of one megakernel schedule 0.0-0.3% apart (megakernel_edits_caps_path.json, default and d2).
CREDIT_MARGIN = {"code": 0.02, "edits": 0.01}


def credit_margin(r: EvalResult, kind: str = "code") -> float:
    """The score (ln speedup) by which `r` must pass the best so far to be credited as a new best:
    CREDIT_MARGIN[kind] for a correct GPU-timed result (three times its own median's relative standard
    error where that is larger: the worker reports it, so it can only raise the bar), 0 for everything
    else (sim and cpu scores are exact, failure tiers fixed)."""
    if r.status != "correct" or r.backend != "gpu" or not r.speedup:
        return 0.0
    return math.log1p(noise_margin(r.timing, kind))


def noise_margin(timing: dict | None, kind: str = "code") -> float:
    """How much faster (relative) a GPU-timed result must read to be past its timing's noise: CREDIT_MARGIN[kind],
    or three of the timing's own relative standard errors (at most 1) where that is larger."""
    rel = CREDIT_MARGIN.get(kind, CREDIT_MARGIN["code"])
    rse = (timing or {}).get("rel_stderr")
    if isinstance(rse, (int, float)) and math.isfinite(rse):
        rel = max(rel, min(3.0 * rse, 1.0))
    return rel


class TurnRewards:
    """An episode's turn rewards from its turns' scores (gated_log_speedup), by mode:

    - "improvement" (the env's default): each turn earns its score minus the previous turn's, the
      first turn's minus the episode's start (0 for a level-5 episode, whose default schedule scores
      0 against itself; the failure tier -1 for kernel code, where nothing is written yet). A turn that
      does better than the one before earns a positive reward, worse a negative one, and a correct
      kernel always more than an incorrect one, an incorrect one more than one that does not compile.
      The episode's last turn (`submit`, or the turn that reaches the limit) also earns the best score
      minus the last one, so the return is the best score found minus the start.
    - "best": each turn earns how much it raises the best score so far (never negative); the return is
      the same, but a turn below the best earns 0 whatever it was.
    - "score": each turn earns its score.

    A turn is credited as the new best only where its score passes the best by `margin` (credit_margin:
    a GPU timing's noise; 0 where scores are exact). A faster draw of a kernel no better than the best
    then earns nothing past it, and the return is the best credited minus the start. `credited` tells
    whether the last turn was.
    """

    def __init__(self, mode: str, start: float):
        if mode not in EPISODE_REWARDS:
            raise ValueError(f"unknown reward mode {mode!r}; use one of {', '.join(EPISODE_REWARDS)}")
        self.mode, self.start = mode, start
        self.prev = self.best = start
        self.credited = False

    def turn(self, score: float, last: bool = False, margin: float = 0.0) -> float:
        self.credited = score > self.best + margin
        best = score if self.credited else self.best
        if self.mode == "improvement":
            reward = score - self.prev
        elif self.mode == "best":
            reward = best - self.best
        else:
            reward = score
        self.prev, self.best = score, best
        if last and self.mode == "improvement":
            reward += self.best - score
        return float(reward)

    def submit(self) -> float:
        """The reward of `submit` (it ends the episode; nothing is scored)."""
        return float(self.best - self.prev) if self.mode == "improvement" else 0.0


def kevin_reward(r: EvalResult) -> float:
    """Kevin-32B's per-turn reward: 0.3 * correct + speedup (speedup only when correct)."""
    if r.status != "correct":
        return 0.0
    return 0.3 + (r.speedup or 0.0)


def milestone_reward(r: EvalResult) -> float:
    """1 for correct, +1 for beating eager PyTorch, +1 for beating torch.compile (CUDA Agent's ladder)."""
    if r.status != "correct":
        return 0.0
    score = 1.0
    if r.speedups.get("eager", 0.0) > 1.0:
        score += 1.0
    if r.speedups.get("torch_compile", 0.0) > 1.0:
        score += 1.0
    return score


def fast_p(results: Iterable[EvalResult], p: float = 1.0) -> float:
    """KernelBench's fast_p: the fraction of results that are correct and faster than p x."""
    results = list(results)
    if not results:
        return 0.0
    return sum(1 for r in results if r.correct and (r.speedup or 0.0) > p) / len(results)


REWARD_FUNCTIONS = {"gated_log_speedup": gated_log_speedup, "kevin": kevin_reward,
                    "milestone": milestone_reward}
