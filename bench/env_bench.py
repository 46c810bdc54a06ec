"""MegaKernel-v0 steps per second, and a gpu episode whose good kernel earns a positive reward.

    python bench/env_bench.py [--out DIR] [--steps N]

sim: IR-edit steps on the 1B-shaped MLP block and the whole 1B-shaped decoder (cost-model
scoring, one env, sequential). gpu (when a CUDA device is present): an episode on softmax
whose first action is the shipped Triton reference (compile, 6 seeds, timing, baselines),
then resubmissions of distinct copies of it (each compiled and timed again), one env one step
at a time; then the same with --vector-envs episodes stepped together (their kernels judged as
one batch on the judge's pool).
Writes env_steps.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gymnasium as gym  # noqa: E402

import megakernel_gym  # noqa: E402,F401
from judge_bench import spread, write  # noqa: E402
from megakernel_gym.curriculum import reference_candidates  # noqa: E402

EDITS = {"mk_mlp_block": ["prefetch gate_proj depth=1\nprefetch up_proj depth=1\nprefetch down_proj depth=1",
                          "assign * sms=0-63", "prefetch down_proj depth=2", "tile gate_proj n=64"],
         "mk_llama_decode": ["prefetch layers.{0..15}.mlp.down_proj depth=1", "assign lm_head sms=0-99",
                             "prefetch lm_head depth=1", "counter lm_head op"]}


def bench_sim(steps: int) -> list[dict]:
    rows = []
    env = gym.make("MegaKernel-v0", backend="sim")
    for problem, edits in EDITS.items():
        t0 = time.perf_counter()
        env.reset(seed=0, options={"problem": problem})
        first_reset = time.perf_counter() - t0
        times, rewards = [], []
        for i in range(steps):
            t = time.perf_counter()
            _, r, _, trunc, info = env.step(edits[i % len(edits)])
            times.append(time.perf_counter() - t)
            rewards.append(r)
            if trunc:
                env.reset(seed=i, options={"problem": problem})
        rows.append({"backend": "sim", "problem": problem, "steps": steps, "first_reset_s": round(first_reset, 3),
                     "step_s": spread(times), "steps_per_s": 1 / statistics.median(times),
                     "rewards": [round(x, 4) for x in rewards[:8]]})
        print(rows[-1], flush=True)
    env.close()
    return rows


def bench_gpu(steps: int) -> tuple[list[dict], float | None]:
    import torch
    if not torch.cuda.is_available():
        return [], None
    ref = reference_candidates("softmax")["triton"].source
    env = gym.make("MegaKernel-v0", backend="gpu")
    env.reset(seed=0, options={"problem": "softmax"})
    t = time.perf_counter()
    _, first_reward, _, _, info = env.step("```python\n" + ref + "\n```")
    first = {"backend": "gpu", "problem": "softmax", "action": "the shipped Triton reference (first step: compile, "
             "seeds, timing, baselines)", "seconds": round(time.perf_counter() - t, 3), "reward": first_reward,
             "status": info["eval"]["status"], "speedup": info["eval"]["speedup"],
             "speedups": info["eval"]["speedups"]}
    print(first, flush=True)
    times = []
    for i in range(steps):
        src = ref + f"\n# resubmission {time.time_ns()} {i}\n"    # a new source: judged again, not cached
        t = time.perf_counter()
        _, _, _, trunc, info = env.step("```python\n" + src + "\n```")
        times.append(time.perf_counter() - t)
        if trunc:
            env.reset(seed=i, options={"problem": "softmax"})
    env.close()
    rows = [first, {"backend": "gpu", "problem": "softmax", "steps": steps, "step_s": spread(times),
                    "steps_per_s": 1 / statistics.median(times)}]
    print(rows[-1], flush=True)
    return rows, first_reward


def bench_gpu_vector(num_envs: int, steps: int) -> list[dict]:
    """num_envs episodes stepped together: their kernels are judged as one batch on the pool."""
    import torch
    if not torch.cuda.is_available():
        return []
    ref = reference_candidates("softmax")["triton"].source
    envs = gym.make_vec("MegaKernel-v0", num_envs=num_envs, vectorization_mode="vector_entry_point", backend="gpu")
    envs.reset(seed=0, options={"problem": "softmax"})
    envs.step(["```python\n" + ref + "\n```"] * num_envs)     # warm: baselines, workers, compile caches
    times, statuses = [], []
    for i in range(steps):
        acts = ["```python\n" + ref + f"\n# env {k} step {i} {time.time_ns()}\n```" for k in range(num_envs)]
        t = time.perf_counter()
        _, _, _, _, infos = envs.step(acts)
        times.append(time.perf_counter() - t)
        statuses += list(infos["eval"]["status"])
    envs.close()
    row = {"backend": "gpu", "problem": "softmax", "vector_envs": num_envs, "steps": steps,
           "batch_step_s": spread(times), "env_steps_per_s": num_envs / statistics.median(times),
           "statuses": {s: statuses.count(s) for s in set(statuses)}}
    print(row, flush=True)
    return [row]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--vector-envs", type=int, default=8, help="sub-envs of the batched gpu measurement")
    args = ap.parse_args()
    rows = bench_sim(args.steps)
    gpu_rows, reward = bench_gpu(args.steps)
    rows += gpu_rows
    rows += bench_gpu_vector(args.vector_envs, max(3, args.steps // 2))
    targets = []   # steps/s are measurements (rows); the one pass/fail line is the reward's sign
    if reward is not None:
        targets.append({"target": "on the gpu backend a good kernel earns a positive reward from measured speedup",
                        "measured": round(reward, 4), "met": reward > 0})
    write("steps", rows, targets, Path(args.out), prefix="env_")


if __name__ == "__main__":
    main()
