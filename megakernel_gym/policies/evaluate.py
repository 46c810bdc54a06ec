"""`mkgym eval`: a policy's episodes over a suite split, summarised per level as a leaderboard row.

    board = evaluate_policy("search", backend="sim", split="train", levels=[5])
    print(format_board([board]))

Per level: episodes, pass rate (the episode's best result was correct), fast_1 (correct and
faster than the reference point: the best baseline for kernels, the default schedule for
megakernels), and the geometric-mean speedup over the correct episodes.
"""
from __future__ import annotations

import math
import time
from typing import Any, Iterable


def _episode(env, policy, problem: str, seed: int) -> dict[str, Any]:
    obs, info = env.reset(seed=seed, options={"problem": problem})
    policy.reset(env.unwrapped, obs, info)
    total, turns, t0 = 0.0, 0, time.perf_counter()
    while True:
        obs, reward, term, trunc, info = env.step(policy.act(obs, info))
        total += reward
        turns += 1
        if term or trunc:
            break
    best = env.unwrapped.best_result
    if best is None and info["kind"] == "edits":
        # nothing scored better than the failure tier: the compiler's default schedule stands, and it is
        # the reference point itself (speedup 1 by definition; the gpu judge checks it at start-up)
        return {"problem": problem, "level": info["level"], "turns": turns, "return": total, "correct": True,
                "speedup": 1.0, "status": "default_schedule", "seconds": round(time.perf_counter() - t0, 2)}
    speedup = None
    if best and best.correct:
        # level 5's leaderboard is over the compiler's default schedule, what schedule edits improve;
        # the gpu judge's own speedup (the reward's) is over the fastest baseline, which may be PyTorch
        speedup = (best.speedups or {}).get("default_schedule", best.speedup) if info["kind"] == "edits" \
            else best.speedup
    return {"problem": problem, "level": info["level"], "turns": turns, "return": total,
            "correct": bool(best and best.correct), "speedup": speedup,
            "status": best.status if best else "no_result", "seconds": round(time.perf_counter() - t0, 2)}


def summarize(episodes: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    by: dict[int, list[dict]] = {}
    for e in episodes:
        by.setdefault(e["level"], []).append(e)
    out = {}
    for level, eps in sorted(by.items()):
        sp = [e["speedup"] for e in eps if e["correct"] and e["speedup"]]
        out[level] = {"episodes": len(eps), "pass_rate": sum(e["correct"] for e in eps) / len(eps),
                      "fast_1": sum(1 for e in eps if e["correct"] and (e["speedup"] or 0) > 1.0) / len(eps),
                      "geomean_speedup": math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None,
                      "mean_return": sum(e["return"] for e in eps) / len(eps)}
    return out


def select_problems(env, problems: list[str] | None = None, split: str | None = None,
                    levels: list[int] | None = None) -> list[str]:
    """The named problems (each checked against the env's suite), or those of the split and levels
    the env's backend can score; a ValueError when nothing is left."""
    suite = env.curriculum.suite
    served = set(env._levels())
    if problems:
        for n in problems:
            suite.get(n)                    # an unknown name fails here, with the suite's message
        return list(problems)
    names = [p.name for p in suite.filter(split=split).problems
             if (not levels or p.level in levels) and p.level in served]
    if not names:
        raise ValueError(f"no problems match split={split!r} levels={levels} on the {env.backend} backend "
                         f"(it serves levels {sorted(served)})")
    return names


def evaluate_policy(policy: str, backend: str = "sim", split: str | None = None, levels: list[int] | None = None,
                    problems: list[str] | None = None, episodes: int = 1, seed: int = 0, log=None,
                    **policy_kw) -> dict[str, Any]:
    """Run `episodes` episodes of `policy` on each chosen problem; return the leaderboard row."""
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies.baselines import make_policy
    pol = make_policy(policy, seed=seed, **policy_kw)
    env = MegaKernelEnv(backend=backend)
    eps: list[dict[str, Any]] = []
    try:
        for name in select_problems(env, problems, split, levels):
            for k in range(episodes):
                e = _episode(env, pol, name, seed + k)
                eps.append(e)
                if log is not None:
                    sp = f"{e['speedup']:.3f}x" if e["speedup"] else "-"
                    print(f"  {policy:10s} {name:28s} L{e['level']} {e['status']:14s} speedup {sp:>8s} "
                          f"return {e['return']:+.3f} ({e['seconds']:.1f} s)", file=log, flush=True)
    finally:
        env.close()
    return {"policy": policy, "backend": env.backend, "split": split, "levels": summarize(eps), "episodes": eps}


def format_board(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'policy':12s} {'level':>5s} {'episodes':>8s} {'pass rate':>9s} {'fast_1':>7s} {'geomean x':>9s} "
             f"{'return':>7s}"]
    for row in rows:
        for level, s in row["levels"].items():
            g = f"{s['geomean_speedup']:.3f}" if s["geomean_speedup"] else "-"
            lines.append(f"{row['policy']:12s} {level:>5d} {s['episodes']:>8d} {s['pass_rate']:>9.0%} "
                         f"{s['fast_1']:>7.0%} {g:>9s} {s['mean_return']:>+7.3f}")
    return "\n".join(lines)


__all__ = ["evaluate_policy", "select_problems", "summarize", "format_board"]
