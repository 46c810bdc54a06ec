"""`mkgym train grpo`: TRL's GRPOTrainer on MegaKernel-v0's problems, rewarded by the env itself.

    trainer = train_grpo("path/to/causal-lm", "grpo.toml", out_dir="runs/grpo")

Read top to bottom: a config file (TOML) names the problems (levels, split, backend) and GRPOConfig's
fields; `prompt_dataset` turns each problem's first observation into a `datasets` row (the prompt
an LLM policy sees, plus the problem's name); `EnvReward` scores a completion by playing it as the
one action of a fresh episode of that problem (the same judge, sim cost model or megakernel
measurement an RL loop on the env would get: gated log-speedup); GRPOTrainer does the rest.
W&B is offline unless the user has a key or sets WANDB_MODE.

Single-turn (default): one completion is one action. Multi-turn (`multi_turn = true`): TRL's
environment_factory drives the env through two tools, apply_edit and submit_kernel, and the
episode's best score is the reward (get_reward); the model's tokenizer needs a chat template
with tool calls.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

# our keys; every other key in the config file is a GRPOConfig field
OWN_KEYS = {"levels": [5], "split": "train", "problems": None, "backend": "sim", "repeat": 8, "multi_turn": False}


class TrainConfigError(ValueError):
    """A config or model the trainer cannot use; the message names it and the fix."""


def load_config(path: str | Path | dict | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our settings, GRPOConfig keyword arguments) from a TOML file (or a dict); unknown keys are errors."""
    from trl import GRPOConfig
    import dataclasses
    if path is None:
        raw: dict[str, Any] = {}
    elif isinstance(path, dict):
        raw = dict(path)
    else:
        p = Path(path)
        if not p.is_file():
            raise TrainConfigError(f"config file {str(path)!r} does not exist; write a TOML file of GRPOConfig fields "
                                   f"plus {sorted(OWN_KEYS)}")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise TrainConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from e
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(k for k in raw if k not in fields and k not in OWN_KEYS)
    if unknown:
        import difflib
        hint = difflib.get_close_matches(unknown[0], sorted(fields | set(OWN_KEYS)), n=1)
        raise TrainConfigError(f"unknown config key {unknown[0]!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                               + f"; keys are GRPOConfig's fields and {sorted(OWN_KEYS)}")
    own = {k: raw.get(k, v) for k, v in OWN_KEYS.items()}
    return own, {k: v for k, v in raw.items() if k not in OWN_KEYS}


def prompt_dataset(own: dict[str, Any]):
    """One row per problem (repeated `repeat` times): prompt, problem, level, kind."""
    import datasets

    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies.evaluate import select_problems
    env = MegaKernelEnv(backend=own["backend"])
    try:
        try:
            names = select_problems(env, own["problems"], own["split"], own["levels"])
        except ValueError as e:
            raise TrainConfigError(f"{e}; change problems, levels or split in the config") from e
        rows = []
        for name in names:
            _, info = env.reset(seed=0, options={"problem": name})
            text = info["prompt"]
            if own.get("multi_turn"):   # a chat: the tools (apply_edit, submit_kernel) come from the env class
                text = [{"role": "user", "content": text + "\n\nUse the tools: apply_edit for IR edits, "
                                                           "submit_kernel for kernel code."}]
            rows.append({"prompt": text, "problem": name, "level": info["level"], "kind": info["kind"]})
    finally:
        env.close()
    return datasets.Dataset.from_list(rows * max(1, int(own["repeat"])))


class EnvReward:
    """A TRL reward function: each completion is played as the one action of a fresh episode of
    its row's problem; the reward is that step's gated log-speedup (failure tiers below 0)."""

    def __init__(self, backend: str = "sim"):
        from megakernel_gym.env.megakernel import MegaKernelEnv
        self.env = MegaKernelEnv(backend=backend, reward="score")
        self.__name__ = "env_reward"          # TRL logs each reward function under its name
        self.seen = 0
        self.correct = 0

    def __call__(self, prompts=None, completions=None, problem=None, level=None, **kwargs) -> list[float]:
        out, statuses, speedups, feedback = [], [], [], []
        by_level: dict[int, list[bool]] = {}
        for i, (text, name) in enumerate(zip(completions, problem)):
            if isinstance(text, list):         # conversational datasets: the assistant message
                text = text[-1]["content"] if text else ""
            self.env.reset(options={"problem": name})
            obs, reward, _, _, info = self.env.step(text if text.strip() else "(empty)")
            ev = info.get("eval") or {}
            self.seen += 1
            self.correct += bool(ev.get("correct"))
            by_level.setdefault(info["level"], []).append(bool(ev.get("correct")))
            statuses.append(ev.get("status", "none"))
            speedups.append(ev.get("speedup"))
            feedback.append(obs["feedback"][:400])
            out.append(float(reward))
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        if callable(log_metric):               # W&B: pass rate overall and per level
            log_metric("env/pass_rate", self.correct / max(1, self.seen))
            for lv, oks in by_level.items():
                log_metric(f"env/L{lv}/pass_rate", sum(oks) / len(oks))
        if callable(log_extra):                # columns of the completions table: what the env said
            log_extra("status", statuses)
            log_extra("speedup", speedups)
            log_extra("feedback", feedback)
        return out

    def close(self) -> None:
        self.env.close()


def tool_env_class(backend: str = "sim"):
    """The env as TRL's environment_factory wants it: reset(**row), public methods as tools, and
    get_reward() owning the reward (the episode's best gated log-speedup so far)."""
    from megakernel_gym.env.megakernel import FLOOR_SCORE, MegaKernelEnv

    class MegaKernelTools:
        def __init__(self):
            self._env = MegaKernelEnv(backend=backend)
            self._done = True

        def reset(self, **row) -> str | None:
            self._env.reset(options={"problem": row["problem"]})
            self._done = False
            return None              # the row's prompt already holds the first observation

        def _step(self, action: str) -> str:
            if self._done:
                return "The episode has ended; no more actions are taken."
            obs, _, term, trunc, _ = self._env.step(action if action.strip() else "(empty)")
            self._done = term or trunc
            return obs["feedback"]

        def apply_edit(self, edits: str) -> str:
            """Apply megakernel IR edits and score the new schedule.

            Args:
                edits: Edit commands, one per line, e.g. "fuse gate_proj into silu_mul".

            Returns:
                Feedback on the edits: the new score and speedup, or why they were refused.
            """
            return self._step(edits)

        def submit_kernel(self, code: str) -> str:
            """Submit a Python module defining ModelNew (Triton or CUDA C kernels) to the judge.

            Args:
                code: The module's source code.

            Returns:
                The judge's feedback: correctness per seed, speedup, or the failure and its reason.
            """
            return self._step(f"```python\n{code}\n```")

        def get_reward(self) -> float:
            best = self._env.best
            return float(best if best > FLOOR_SCORE else FLOOR_SCORE)

    return MegaKernelTools


def _wandb_default(report_to) -> None:
    """W&B offline unless the user chose: with no key and no WANDB_MODE it would fail at once."""
    wants = report_to == "wandb" or (isinstance(report_to, list) and "wandb" in report_to)
    if wants and not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
        os.environ["WANDB_MODE"] = "offline"


def train_grpo(model: str, config: str | Path | dict | None = None, out_dir: str | Path = "runs/grpo",
               resume: bool = False):
    """Train `model` (a local Hugging Face causal LM folder or hub name already cached) with GRPO on
    the config's problems; returns the trainer after training (checkpoints under out_dir)."""
    from trl import GRPOConfig, GRPOTrainer
    if "/" in model or os.sep in model or model.startswith("."):
        if not Path(model).exists():
            raise TrainConfigError(f"model path {model!r} does not exist; give a folder with config.json and "
                                   "weights (save_pretrained), or a model name your Hugging Face cache holds")
    own, grpo = load_config(config)
    grpo.setdefault("output_dir", str(out_dir))
    grpo.setdefault("report_to", "wandb")
    grpo.setdefault("logging_steps", 1)
    grpo.setdefault("log_completions", True)      # W&B gets a table of sample actions with the env's verdicts
    _wandb_default(grpo["report_to"])
    os.environ.setdefault("WANDB_DIR", str(Path(grpo["output_dir"]).resolve()))   # runs beside the checkpoints
    Path(grpo["output_dir"]).mkdir(parents=True, exist_ok=True)
    try:
        import torch
        if not torch.cuda.is_available():
            grpo.setdefault("use_cpu", True)
            grpo.setdefault("bf16", False)
    except ImportError:
        pass
    args = GRPOConfig(**grpo)
    reward = EnvReward(own["backend"])
    try:
        if own["multi_turn"]:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(model)
            if not tok.chat_template:
                raise TrainConfigError(f"the tokenizer of {model!r} has no chat template; multi-turn training calls "
                                       "the env's tools, which needs one that supports tool calls (Qwen3's, Llama 3's; "
                                       "make_tiny_model(..., chat=True) for a tiny one), or set multi_turn = false")
            trainer = GRPOTrainer(model=model, reward_funcs=None, args=args, train_dataset=prompt_dataset(own),
                                  processing_class=tok, environment_factory=tool_env_class(own["backend"]))
        else:
            trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=prompt_dataset(own))
        trainer.train(resume_from_checkpoint=True if resume else None)
    finally:
        reward.close()
        try:
            import wandb
            if wandb.run is not None:     # close the run here, not at exit (where it would print on stdout)
                wandb.finish()
        except ImportError:
            pass
    return trainer


__all__ = ["train_grpo", "load_config", "prompt_dataset", "EnvReward", "TrainConfigError", "OWN_KEYS",
           "tool_env_class"]
