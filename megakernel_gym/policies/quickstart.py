"""`mkgym train quickstart`: GRPO that shows learning on a laptop's CPU in a few minutes.

    pip install -e '.[train]'
    mkgym train quickstart --out runs/quickstart          # the shipped quickstart.toml; --config F for yours

Read top to bottom. A fresh tiny transformer (policies/lm.py's model: a word-level GPT-2 made on the
spot, 2 layers of width 64) plays level 5 in the sim. It reads the default schedule's IR as one row
per op line (the op's kind, its readers' kinds, its shape and grid; no names) and writes one decision
per row: `fuse` into its reader, `inline`, an `op` counter, a tile `t<N>`, split parts `s<N>`, or `-`,
among the words that kind of row may take (the action mask the shipped policy learned from its
demonstrations; `action_mask = false` allows every word everywhere).
TRL's GRPOTrainer samples the decisions through a rollout_func (policies.lm.decide: each row's words
fed in, a decision word drawn from the softmax over the decision words), and the env scores what they
spell: the decisions become edit lines, a line the IR refuses is dropped (0.05 off the reward each),
and the rest are played as the one action of a fresh MegaKernel-v0 episode on the sim backend, whose
reward (score mode) is the gated log-speedup over the compiler's default schedule. So an untrained
model earns about what random decisions earn, and GRPO moves it toward the decisions that pay.

Each step prints one line (the batch's mean reward and spread, the best speedup so far, the loss, the
seconds); `--show-completions` adds TRL's table of sampled completions. The run folder gets
`curve.json` (the per-step rewards), `reward_curve.png`, the trained policy (`policy/`: the model, its
tokenizer and action mask, which `mkgym export --run DIR` plays to write its schedules as megakernels;
the sim judges no kernels) and the W&B run (offline unless you have a key).
bench/learning_quickstart.py runs it and records the curve in bench/results/.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

SHIPPED_CONFIG = Path(__file__).with_name("quickstart.toml")
# our keys; the rest of the file is GRPOConfig's fields
OWN = {"problems": ["mk_mlp_block"], "n_layer": 2, "n_embd": 64, "device": "H100", "drop_penalty": 0.05,
       "action_mask": True, "seed": 0}


def load_quickstart_config(path: str | Path | None) -> tuple[dict, dict]:
    """(our settings, GRPOConfig's) from the shipped TOML or yours; an unknown key is named with its fix."""
    from megakernel_gym.policies.train import TrainConfigError, split_config
    p = Path(path) if path else SHIPPED_CONFIG
    if not p.is_file():
        raise TrainConfigError(f"config file {str(p)!r} does not exist (the shipped one is {SHIPPED_CONFIG})")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TrainConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from e
    return split_config(raw, OWN)


class SimEnvReward:
    """GRPO's reward for a completion of decisions: the edit lines they spell, refused lines dropped
    (each `drop_penalty` off), played as the first action of a fresh sim episode (reward="score": the
    gated log-speedup over the default schedule). Cached per (problem, edit text)."""

    def __init__(self, problems: list[str], device: str, drop_penalty: float):
        from megakernel_gym.env.megakernel import MegaKernelEnv
        from megakernel_gym.policies.lm import prompt_of
        self.env = MegaKernelEnv(backend="sim", reward="score", device=device)
        self.ir0, self.rows, self.prompts = {}, {}, {}
        for name in problems:
            obs, _ = self.env.reset(seed=0, options={"problem": name})
            if self.env.kind != "edits":
                raise ValueError(f"the quickstart plays level-5 problems (IR edits); {name!r} is kernel code")
            self.ir0[name] = self.env.ir
            self.prompts[name], self.rows[name] = prompt_of(obs["code"])
        self.drop_penalty = drop_penalty
        self.cache: dict = {}
        self.best_speedup = 1.0
        self.__name__ = "sim_env_reward"     # TRL logs a reward function under its name

    def __call__(self, prompts=None, completions=None, problem=None, **kw) -> list[float]:
        from megakernel_gym.policies.lm import apply_decisions, decisions_from_text
        out = []
        for text, name in zip(completions, problem):
            text = decisions_from_text(text)
            key = (name, text)
            if key not in self.cache:
                edits, _, dropped = apply_decisions(self.ir0[name], self.rows[name], text, max_drops=8)
                self.env.reset(seed=0, options={"problem": name})
                if edits:
                    _, r, _, _, info = self.env.step(edits)
                    self.best_speedup = max(self.best_speedup, info["eval"].get("speedup") or 0.0)
                else:
                    r = 0.0        # nothing taken: the default schedule stands
                self.cache[key] = r - self.drop_penalty * dropped
            out.append(self.cache[key])
        return out

    def close(self) -> None:
        self.env.close()


def step_printer(reward: SimEnvReward, curve: list, log, max_steps: int):
    """A TrainerCallback printing one line per optimizer step and keeping the curve."""
    from transformers import TrainerCallback

    class StepLine(TrainerCallback):
        def __init__(self):
            self.t = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:
                return
            now = time.perf_counter()
            row = {"step": state.global_step, "reward": logs["reward"], "reward_std": logs.get("reward_std"),
                   "loss": logs.get("loss"), "best_speedup": reward.best_speedup, "seconds": round(now - self.t, 1)}
            curve.append(row)
            self.t = now
            print(f"step {row['step']:3d}/{max_steps}  reward {row['reward']:+.4f} (spread {row['reward_std'] or 0:.4f})"
                  f"  best speedup {row['best_speedup']:.3f}x  loss {row['loss'] if row['loss'] is not None else 0:+.4f}"
                  f"  {row['seconds']:.1f} s", file=log, flush=True)

    return StepLine()


def nice_step(span: int, most: int = 10) -> int:
    """A whole tick step of 1, 2 or 5 times a power of ten, giving at most `most` intervals over `span`."""
    step = 1
    while True:
        for mult in (1, 2, 5):
            if span / (step * mult) <= most:
                return step * mult
        step *= 10


def curve_png(curve: list[dict], path: Path, title: str, w: int = 720, h: int = 400) -> None:
    """The mean reward per step (dots) and its running mean over 5 steps (line), drawn with Pillow."""
    from PIL import Image, ImageDraw
    left, right, top, bottom = 70, 20, 40, 50
    img = Image.new("RGB", (w, h), (255, 255, 255))
    d = ImageDraw.Draw(img)
    d.text((left, 10), title, fill=(0, 0, 0))
    ys = [c["reward"] for c in curve]
    xs = [c["step"] for c in curve]
    if not ys:
        d.text((left, h // 2), "no steps logged", fill=(0, 0, 0))
        img.save(path)
        return
    lo, hi = min(ys), max(ys)
    lo, hi = (lo - 0.05, hi + 0.05) if hi - lo < 1e-9 else (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    x_max = max(xs[-1], 1)
    px = lambda x: left + (w - left - right) * x / x_max  # noqa: E731
    py = lambda y: top + (h - top - bottom) * (hi - y) / (hi - lo)  # noqa: E731
    d.line([left, top, left, h - bottom, w - right, h - bottom], fill=(0, 0, 0))
    for k in range(5):
        y = lo + (hi - lo) * k / 4
        d.text((4, py(y) - 6), f"{y:+.3f}", fill=(0, 0, 0))
        d.line([left - 4, py(y), left, py(y)], fill=(0, 0, 0))
    d.text((left + (w - left - right) // 2 - 30, h - bottom + 24), "GRPO step", fill=(0, 0, 0))
    step = nice_step(x_max)
    for x in range(0, x_max + 1, step):
        d.line([px(x), h - bottom, px(x), h - bottom + 4], fill=(0, 0, 0))
        d.text((px(x) - 3 * len(str(x)), h - bottom + 7), str(x), fill=(0, 0, 0))
    for x, y in zip(xs, ys):
        d.ellipse([px(x) - 2, py(y) - 2, px(x) + 2, py(y) + 2], fill=(31, 119, 180))
    run = [statistics.fmean(ys[max(0, i - 4):i + 1]) for i in range(len(ys))]
    d.line([(px(x), py(y)) for x, y in zip(xs, run)], fill=(214, 39, 40), width=2)
    d.text((left + 8, top + 4), "mean reward of the step's completions (dots); running mean of 5 (line)",
           fill=(90, 90, 90))
    img.save(path)


def train_quickstart(config: str | Path | None = None, out_dir: str | Path = "runs/quickstart",
                     show_completions: bool = False, log=sys.stderr, **overrides) -> dict[str, Any]:
    """Train a fresh tiny policy with GRPO in the sim; returns the summary (also `curve.json` in out_dir).
    overrides: GRPOConfig fields or our keys that replace the config's (tests: max_steps=2)."""
    own, grpo = load_quickstart_config(config)
    for k, v in overrides.items():
        (own if k in OWN else grpo)[k] = v
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from trl import GRPOTrainer  # noqa: F401  (before WANDB_MODE: transformers prints a line at import under offline)

    from megakernel_gym.policies.quiet import library_noise_off, offline_run_note
    if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
        os.environ["WANDB_MODE"] = "offline"          # W&B without an account: a run folder to sync later
    os.environ.setdefault("WANDB_DIR", str(out.resolve()))
    os.environ.setdefault("WANDB_PROJECT", "megakernel-gym")
    torch.manual_seed(own["seed"])
    t0 = time.perf_counter()
    print(f"quickstart: GRPO on {', '.join(own['problems'])} in the sim (the cost model's {own['device']} constants), "
          f"a fresh {own['n_layer']}-layer model of width {own['n_embd']}; run folder {out}", file=log, flush=True)
    with library_noise_off():
        reward, curve, policy_dir = _train(own, grpo, out, show_completions, log)
    k = max(1, min(5, len(curve) // 3))
    first = statistics.fmean(c["reward"] for c in curve[:k]) if curve else math.nan
    last = statistics.fmean(c["reward"] for c in curve[-k:]) if curve else math.nan
    summary = {"problems": own["problems"], "steps": len(curve), "seconds": round(time.perf_counter() - t0, 1),
               "first_steps_mean_reward": first, "last_steps_mean_reward": last, "best_speedup": reward.best_speedup,
               "curve": curve, "config": {**own, **{k: v for k, v in grpo.items() if k != "output_dir"}},
               "picture": str(out / "reward_curve.png"), "policy": str(policy_dir)}
    (out / "curve.json").write_text(json.dumps(summary, indent=1))
    curve_png(curve, out / "reward_curve.png", f"quickstart: GRPO in the sim on {', '.join(own['problems'])}")
    print(f"done in {summary['seconds']:.0f} s: mean reward {first:+.4f} over the first {k} step(s), {last:+.4f} over "
          f"the last {k}; best speedup {reward.best_speedup:.3f}x; curve in {out / 'reward_curve.png'}",
          file=log, flush=True)
    print(f"trained policy in {policy_dir}: `mkgym export --run {out} --out mk/` writes the schedules it plays as "
          "megakernels (the sim judged no kernels)", file=log, flush=True)
    if ("wandb" in str(summary["config"].get("report_to")) and os.environ.get("WANDB_MODE") == "offline"
            and (note := offline_run_note(os.environ["WANDB_DIR"]))):
        print(note, file=log, flush=True)
    return summary


def _train(own: dict, grpo: dict, out: Path, show_completions: bool, log) -> tuple[SimEnvReward, list, Path]:
    """GRPO itself: the fresh model, the rollouts, the trainer; the trained policy saved to out/policy."""
    import datasets
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from megakernel_gym.policies.export import RUN_POLICY
    from megakernel_gym.policies.lm import ACTIONS_FILE, SHIPPED_MODEL, decide, make_lm
    reward = SimEnvReward(own["problems"], own["device"], own["drop_penalty"])
    policy_dir = out / RUN_POLICY
    try:
        model_dir = make_lm(out / "init", list(reward.prompts.values()), n_layer=own["n_layer"],
                            n_embd=own["n_embd"], n_head=2, seed=own["seed"])
        tok = AutoTokenizer.from_pretrained(model_dir)
        gen = torch.Generator().manual_seed(own["seed"])
        # the action mask: the decision words each kind of row may take (the shipped policy's, from its
        # demonstrations: no fusing a row that has nothing to fuse into); the model itself starts untrained
        mask = SHIPPED_MODEL / ACTIONS_FILE
        actions = json.loads(mask.read_text()) if own["action_mask"] and mask.is_file() else None

        def rollout(prompts, trainer):
            """GRPO's generations: decisions sampled row by row (the row tokens masked out of the loss);
            TRL passes each prompt once per generation, or once for num_generations of them."""
            n = 1 if len(set(prompts)) < len(prompts) else trainer.num_generations
            got = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
            trainer.model.eval()
            for p in prompts:
                for _ in range(n):
                    d = decide(trainer.model, tok, p, sample=True, generator=gen, actions=actions)
                    for k in got:
                        got[k].append(d[k])
            trainer.model.train()
            return got

        ds = datasets.Dataset.from_list([{"prompt": reward.prompts[n], "problem": n} for n in own["problems"]]
                                        * 64).shuffle(seed=own["seed"])
        grpo.setdefault("output_dir", str(out))
        grpo.update(use_cpu=not torch.cuda.is_available(), bf16=False, report_to=grpo.get("report_to", "wandb"),
                    log_completions=show_completions, disable_tqdm=True, logging_steps=1, save_strategy="no",
                    seed=own["seed"])
        grpo.setdefault("run_name", "quickstart")
        args = GRPOConfig(**grpo)
        curve: list[dict] = []
        trainer = GRPOTrainer(model=model_dir, reward_funcs=[reward], args=args, train_dataset=ds,
                              processing_class=tok, rollout_func=rollout,
                              callbacks=[step_printer(reward, curve, log, args.max_steps)])
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        for cb in (PrinterCallback, ProgressCallback):     # our one line a step in place of theirs
            trainer.remove_callback(cb)
        trainer.train()
        # the trained policy as the lm policy loads it (LMGenerator): model, tokenizer, and the action mask
        # it trained under (none: every word), so `mkgym export --run` plays what GRPO trained
        trainer.save_model(str(policy_dir))
        tok.save_pretrained(policy_dir)
        if actions is not None:
            (policy_dir / ACTIONS_FILE).write_text(json.dumps(actions))
    finally:
        reward.close()
        try:
            import wandb
            if wandb.run is not None:
                wandb.finish()
        except ImportError:
            pass
    return reward, curve, policy_dir


__all__ = ["train_quickstart", "load_quickstart_config", "SimEnvReward", "SHIPPED_CONFIG"]
