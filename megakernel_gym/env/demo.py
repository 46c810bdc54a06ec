"""`mkgym demo`: one short episode of a scripted baseline policy, printed turn by turn.

Megakernel problems (level 5): the policy fuses each matmul into the elementwise op that consumes
it (measured faster on an H100), then prefetches every matmul's weights two tiles ahead (which
the calibrated cost model, like the H100, finds slightly slower), then a deliberately bad
placement (half the SMs), then submits. Op-level
problems: the shipped reference kernel under the wrong class name, then as it is, then submit.
The default schedule's timeline above the best one's is saved as a PNG (op-level problems: the best
kernel's timing bars against its baselines, when something was timed), under runs/demo/ by default.
"""
from __future__ import annotations

import sys
from typing import Any

DEFAULT_PROBLEM = "mk_mlp_block"


def megakernel_policy(ir) -> list[str]:
    matmuls = [o.name for o in ir.graph.ops if o.kind == "matmul"]
    from megakernel_gym.ir_exposure.edits import sole_consumer
    fuse = [f"fuse {m} into {c}" for m in matmuls if (c := sole_consumer(ir, m, ("elementwise",)))]
    return ["\n".join(fuse),
            "\n".join(f"prefetch {m} depth=2" for m in matmuls),
            f"assign * sms=0-{ir.plan().num_sms // 2 - 1}",
            "submit"]


def kernel_policy(problem_name: str) -> list[str]:
    from megakernel_gym.curriculum import reference_candidates
    refs = reference_candidates(problem_name)
    if "triton" not in refs:
        raise ValueError(f"the demo's op-level policy replays a shipped reference kernel, and {problem_name!r} has "
                         "none; pick one of: softmax, layernorm, rmsnorm, matmul_bias_relu, gqa_decode, or a "
                         "megakernel problem (mk_*)")
    src = refs["triton"].source
    misnamed = src.replace("class ModelNew", "class MyModel", 1)   # a first try that forgot the interface
    return ["```python\n" + misnamed + "\n```", "```python\n" + src + "\n```", "submit"]


DEFAULT_OUT = "runs/demo/timeline.png"


def schedules_picture(u, backend: str, problem: str):
    """The default schedule's per-SM timeline above the episode's best (the default again where nothing
    beat it), on one time axis, each titled with its predicted time and what predicted it."""
    from megakernel_gym.compiler import predict
    from megakernel_gym.env.timeline import stack, timeline_image, with_axes
    how = (f"predicted for {u.device} by the cost model" + ("" if backend == "sim" else
           f" (the {backend} backend " + ("checks the plan in the CPU VM and times nothing)" if backend == "cpu"
                                          else "measured it: see the episode's feedback)")))
    default, best = u.default_ir.plan(), u.best_ir
    panels = [("default schedule", default)] + ([("best schedule of the episode", best.plan())] if best else [])
    preds = [predict(plan, u.device) for _, plan in panels]
    end = max(p.latency_us for p in preds) or 1.0
    images = []
    for (label, plan), pred in zip(panels, preds):
        # the predicted latency is the last task's finish plus the kernel's launch: drawn first, so the
        # bars end where the title says
        tasks_us = max(pred.finish_us, default=0.0)
        launch = pred.latency_us - tasks_us
        title = (f"{problem}, {label}: {pred.latency_us:.1f} us = {launch:.2f} us launch + {tasks_us:.1f} us of "
                 f"tasks, {how}" + ("; no edit beat it" if not best else ""))
        images.append(with_axes(timeline_image(plan, pred, end_us=end, launch_us=launch), plan, pred, title,
                                end_us=end, launch_us=launch))
    return stack(images)


def run_demo(problem: str = DEFAULT_PROBLEM, backend: str | None = None, out: str = DEFAULT_OUT,
             log=sys.stdout) -> dict[str, Any]:
    import gymnasium as gym

    import megakernel_gym  # noqa: F401  (registers MegaKernel-v0)
    from megakernel_gym.curriculum import get_problem
    from megakernel_gym.env.timeline import save_png
    kind = "edits" if get_problem(problem).meta.get("KIND") == "megakernel" else "code"
    if backend is None:
        # megakernels: the cost model's predictions at the real (1B-shaped) sizes, the backend with a
        # speedup signal on any machine; kernels: the GPU when there is one
        import torch
        backend = "sim" if kind == "edits" else ("gpu" if torch.cuda.is_available() else "cpu")
    env = gym.make("MegaKernel-v0", backend=backend, render_mode="rgb_array")
    turns = []
    try:
        obs, info = env.reset(seed=0, options={"problem": problem})
        u = env.unwrapped
        print(f"== {problem} (level {info['level']}) on the {backend} backend, up to {info['turns']} turns", file=log)
        if kind == "edits" and backend == "sim":
            print(f"sim device: {u.device}, the env's default (costmodel.DEVICES['H200']: fitted to megakernels of four "
                  "model families timed on an H200); the quickstart predicts with device=\"H100\"" if u.device == "H200"
                  else f"sim device: {u.device}", file=log)
        print(obs["feedback"], file=log)
        actions = megakernel_policy(u.ir) if kind == "edits" else kernel_policy(problem)
        for a in actions:
            obs, reward, term, trunc, info = env.step(a)
            shown = a if len(a) < 300 else a[:200] + f"\n... ({len(a)} characters)"
            print(f"\n-- action (turn {info['turn']}):\n{shown}", file=log)
            print(f"-- reward {reward:+.3f}\n{obs['feedback']}", file=log)
            turns.append({"turn": info["turn"], "action": a[:2000], "reward": reward,
                          "status": info.get("eval", {}).get("status", "submitted"),
                          "speedup": info.get("eval", {}).get("speedup")})
            if term or trunc:
                break
        picture = out
        if kind == "edits":       # default above best: titles, one time axis, a legend
            img = schedules_picture(u, backend, problem)
            what = "default and best schedules' timelines"
        elif u.best_result is not None and (u.best_result.timing or {}).get("median_ms"):
            img, what = env.render(), "best kernel's timing bars"
        else:
            img, picture = None, None
            print(f"\nno picture: the {backend} backend timed nothing (it checks correctness only)", file=log)
        if img is not None:
            save_png(img, out)
            print(f"\nsaved the {what} to {out} ({img.shape[1]}x{img.shape[0]})", file=log)
        return {"problem": problem, "backend": backend, "turns": turns, "best_score": u.best,
                "return": sum(t["reward"] for t in turns), "picture": picture}
    finally:
        env.close()
