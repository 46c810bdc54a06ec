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
import sys
import tomllib
from pathlib import Path
from typing import Any

# our keys; every other key in the config file is a GRPOConfig field
OWN_KEYS = {"levels": [5], "split": "train", "problems": None, "backend": "sim", "repeat": 8, "multi_turn": False,
            "curriculum": False, "heldout_share": 0.25, "pool": "local"}


class TrainConfigError(ValueError):
    """A config or model the trainer cannot use; the message names it and the fix."""


def load_config(path: str | Path | dict | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our settings, GRPOConfig keyword arguments) from a TOML file (or a dict); unknown keys are errors."""
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
    return split_config(raw, OWN_KEYS)


def split_config(raw: dict[str, Any], own_keys: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our settings with `own_keys`' defaults, GRPOConfig's fields) of a config; an unknown key is named
    with the nearest known one."""
    import dataclasses

    from trl import GRPOConfig
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(k for k in raw if k not in fields and k not in own_keys)
    if unknown:
        import difflib
        hint = difflib.get_close_matches(unknown[0], sorted(fields | set(own_keys)), n=1)
        raise TrainConfigError(f"unknown config key {unknown[0]!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                               + f"; keys are GRPOConfig's fields and {sorted(own_keys)}")
    return {k: raw.get(k, v) for k, v in own_keys.items()}, {k: v for k, v in raw.items() if k not in own_keys}


def first_prompt(env, name: str) -> dict[str, Any]:
    """A dataset row for `name`: the env's first observation as the prompt, and the problem's level and kind."""
    _, info = env.reset(seed=0, options={"problem": name})
    return {"prompt": info["prompt"], "problem": name, "level": info["level"], "kind": info["kind"]}


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
        rows = [first_prompt(env, name) for name in names]
        if own.get("multi_turn"):   # a chat: the tools (apply_edit, submit_kernel) come from the env class
            for row in rows:
                row["prompt"] = [{"role": "user", "content": row["prompt"] + "\n\nUse the tools: apply_edit for IR "
                                                                          "edits, submit_kernel for kernel code."}]
    finally:
        env.close()
    return datasets.Dataset.from_list(rows * max(1, int(own["repeat"])))


class CurriculumPrompts:
    """Prompts drawn by the curriculum as the trainer reads them. The dataset's rows are slots; a
    slot's problem is drawn when its row is read (datasets' set_transform), from the curriculum's
    current level (or a review of one passed), so a promotion changes what the next batches train
    on. The draw depends only on the slot, the level and the weights at that moment, so the
    num_generations copies of a slot that GRPO reads together get the same problem. A share
    `heldout_share` of draws are the level's held-out problems: scored and recorded (that is what
    promotes) but rewarded None, so the policy never learns from them."""

    def __init__(self, curriculum, prompts: dict[str, dict[str, Any]], heldout_share: float = 0.25, seed: int = 0):
        self.curriculum, self.prompts, self.heldout_share, self.seed = curriculum, prompts, heldout_share, seed

    def draw(self, slot: int) -> dict[str, Any]:
        import numpy as np
        cur = self.curriculum
        rng = np.random.default_rng([self.seed, slot, cur.level, len(cur.promotions)])
        held = bool(rng.random() < self.heldout_share)
        if held:
            names = cur.pools[cur.level]["heldout"]
            name = names[int(rng.integers(len(names)))]
        else:
            name = cur.sample(rng=rng).problem
        return {**self.prompts[name], "problem": name, "heldout": held, "slot": slot}

    def transform(self, batch: dict[str, list]) -> dict[str, list]:
        rows = [self.draw(int(s)) for s in batch["slot"]]
        return {k: [r[k] for r in rows] for k in rows[0]}

    def dataset(self, slots: int):
        import datasets
        first = self.draw(0)
        ds = datasets.Dataset.from_list([{**first, "slot": i} for i in range(slots)])
        ds.set_transform(self.transform)
        return ds


def curriculum_dataset(own: dict[str, Any], state_dir: str | Path | None = None):
    """(the curriculum, its slot dataset): the curriculum from the config (`curriculum = true` for
    the default levels, or a TOML path), restored from `state_dir/curriculum.json` when resuming;
    each level must be one the backend scores."""
    from megakernel_gym.curriculum.curriculum import Curriculum, CurriculumError
    from megakernel_gym.env.megakernel import MegaKernelEnv
    try:
        cur = Curriculum(None if own["curriculum"] is True else own["curriculum"])
        if state_dir and (Path(state_dir) / "curriculum.json").is_file():
            cur = Curriculum.load(Path(state_dir) / "curriculum.json", cur.config)
    except CurriculumError as e:
        raise TrainConfigError(f"{e}; fix the file `curriculum` names in the config") from e
    env = MegaKernelEnv(backend=own["backend"], curriculum=cur)
    try:
        served = set(env._levels())
        missing = [lv for lv in cur.active if lv not in served]
        if missing:
            raise TrainConfigError(f"the curriculum has levels {missing} that the {env.backend} backend cannot score "
                                   f"(it scores levels {sorted(served)}); set backend = \"cpu\" or \"gpu\", or give "
                                   f"`curriculum` a TOML file with only levels {sorted(served)}")
        prompts = {name: first_prompt(env, name) for lv in cur.active
                   for name in dict.fromkeys(cur.pools[lv]["train"] + cur.pools[lv]["heldout"])}
    finally:
        env.close()
    slots = max(64, int(own["repeat"]) * len(prompts))
    return cur, CurriculumPrompts(cur, prompts, float(own["heldout_share"])).dataset(slots)


def curriculum_callback(curriculum):
    """A TrainerCallback that saves the curriculum's state into each checkpoint (curriculum.json),
    so `--resume` goes on at the level and with the statistics training had reached."""
    from transformers import TrainerCallback

    class CurriculumCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if ckpt.is_dir():
                curriculum.save(ckpt / "curriculum.json")

    return CurriculumCallback()


class EnvReward:
    """A TRL reward function: each completion is played as the one action of a fresh episode of
    its row's problem; the reward is that step's gated log-speedup (failure tiers below 0).

    The kernels of one call go to a judge pool together (LocalPool: one evaluation's latency per
    pool-sized batch, not one per completion); IR edits are scored in this process. With a
    curriculum, every outcome is recorded in it (rows marked `heldout` as held-out draws, which may
    promote; they are scored but return None, so GRPO learns nothing from them), and W&B gets the
    curriculum's numbers. The best megakernel's timeline so far goes to W&B and to
    `best_megakernel_timeline.png` in `out_dir`."""

    def __init__(self, backend: str = "sim", curriculum=None, out_dir: str | Path | None = None, pool=None):
        """pool: "local" (default), "ray" (actors on a Ray cluster: RAY_ADDRESS, else a local Ray),
        or a pool object (the caller's, never closed here)."""
        from megakernel_gym.env.megakernel import MegaKernelEnv, pool_kind
        self._pool_kind = pool_kind(pool)
        pool = None if isinstance(pool, str) else pool
        self._make_env = lambda: MegaKernelEnv(backend=backend, reward="score")
        self.envs = [self._make_env()]
        self.backend = self.envs[0].backend
        self.curriculum, self.out_dir = curriculum, Path(out_dir) if out_dir else None
        self._pool, self._own_pool = pool, pool is None
        self.__name__ = "env_reward"          # TRL logs each reward function under its name
        self.seen = 0
        self.correct = 0
        self.best_megakernel = float("-inf")   # the best level-5 score so far (its timeline is logged)

    @property
    def env(self):
        return self.envs[0]

    @property
    def pool(self):
        if self._pool is None:
            from megakernel_gym.rewards import make_pool
            # the run's own results store, beside its checkpoints: `mkgym export --run DIR` ships its kernels
            store = self.out_dir / "results.sqlite" if self.out_dir else None
            self._pool = make_pool(self._pool_kind, self.backend, store=store)
        return self._pool

    def play(self, completions, problems) -> list[tuple[dict, float, dict, Any]]:
        """(obs, reward, info, the IR for edits or None) of each completion played as its problem's
        first action. IR edits are scored in this process on the first env (it keeps each
        megakernel's compiled default); the kernels go to the pool as one batch, from one env each."""
        out: list = [None] * len(completions)
        from megakernel_gym.env.megakernel import judge_pending
        pendings, first = {}, self.envs[0]
        for i, (text, name) in enumerate(zip(completions, problems)):
            if isinstance(text, list):         # conversational datasets: the assistant message
                text = text[-1]["content"] if text else ""
            text = text if text.strip() else "(empty)"
            first.reset(options={"problem": name})
            if first.kind == "edits":
                obs, reward, _, _, info = first.step(text)
                out[i] = (obs, self._one_turn(first, reward, info), info, first.ir)   # IRs are values: for its timeline
                continue
            k = len(pendings) + 1
            if k == len(self.envs):
                self.envs.append(self._make_env())
            self.envs[k].reset(options={"problem": name})
            pendings[i] = self.envs[k].begin_step(text)
        results = judge_pending(pendings, lambda: self.pool)
        for k, (i, p) in enumerate(pendings.items(), start=1):
            obs, reward, _, _, info = self.envs[k].end_step(p, results[i])
            out[i] = (obs, self._one_turn(self.envs[k], reward, info), info, None)
        return out

    @staticmethod
    def _one_turn(env, reward: float, info: dict) -> float:
        """A completion's reward as the one turn it is: `submit` changes nothing, so it earns what the
        episode's start scores (the failure tier for kernel code, the default schedule's score for level
        5), not the env's submit under "score", which pays that for every turn left (a seventh red team
        found a bare `submit` at -10 on softmax, ten times any failure)."""
        return float(env.best) if (info.get("action") or {}).get("kind") == "submit" else reward

    @staticmethod
    def _passed(ev: dict, info: dict) -> bool:
        """A pass in the logged pass rates: a correct kernel; for a level-5 schedule, a correct one faster
        than the default schedule (every schedule the validator takes is correct, so an edit that changes
        nothing, `counter norm op`, had counted as a pass: a seventh red team's no-op policy showed a 100%
        level-5 pass rate). On the gpu backend faster means past the timing's noise, as a new best must be
        (reward_fns.credit_margin): a schedule that changes nothing reads 1.003x as often as 0.997x."""
        if not ev.get("correct"):
            return False
        if info.get("kind") != "edits":
            return True
        from megakernel_gym.rewards.reward_fns import noise_margin
        bar = 1.0 + (noise_margin(ev.get("timing"), "edits") if ev.get("backend") == "gpu" else 0.0)
        return (ev.get("speedups") or {}).get("default_schedule", 0.0) > bar

    def __call__(self, prompts=None, completions=None, problem=None, level=None, heldout=None, **kwargs
                 ) -> list[float | None]:
        out, statuses, speedups, feedback = [], [], [], []
        by_level: dict[int, list[bool]] = {}
        heldout = heldout or [False] * len(completions)
        state = kwargs.get("trainer_state")
        for i, (obs, reward, info, ir) in enumerate(self.play(completions, problem)):
            ev = info.get("eval") or {}
            self.seen += 1
            ok = self._passed(ev, info)
            self.correct += ok
            by_level.setdefault(info["level"], []).append(ok)
            statuses.append(ev.get("status", "none"))
            speedups.append(ev.get("speedup"))
            feedback.append(obs["feedback"][:400])
            if self.curriculum is not None:
                was = self.curriculum.level
                # a pass as the logged rates count it (red team 20: a slower level-5 schedule, every one the
                # validator takes being correct, counted as a solve in the curriculum and its sampler)
                if self.curriculum.record(problem[i], dict(ev, correct=ok) if ev else False, heldout=bool(heldout[i])):
                    step = getattr(state, "global_step", None)
                    self.curriculum.promotions[-1]["step"] = step
                    print(f"curriculum: level {was} -> {self.curriculum.level} at step {step}", file=sys.stderr,
                          flush=True)
            if ir is not None and ev.get("correct") and reward > self.best_megakernel:
                self.best_megakernel = reward
                self._log_timeline(ir, problem[i], ev.get("speedup"), state)
            out.append(None if heldout[i] else float(reward))
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        if callable(log_metric):               # W&B: pass rate overall and per level, the curriculum's numbers
            log_metric("env/pass_rate", self.correct / max(1, self.seen))
            for lv, oks in by_level.items():
                log_metric(f"env/L{lv}/pass_rate", sum(oks) / len(oks))
            for k, v in (self.curriculum.metrics() if self.curriculum is not None else {}).items():
                log_metric(k, v)
        if callable(log_extra):                # columns of the completions table: what the env said
            log_extra("status", statuses)
            log_extra("speedup", speedups)
            log_extra("feedback", feedback)
        return out

    def _log_timeline(self, ir, name: str, speedup, state) -> None:
        from megakernel_gym.compiler import predict
        from megakernel_gym.env.timeline import timeline_image
        plan = ir.plan()
        img = timeline_image(plan, predict(plan, self.env.device))
        caption = f"{name}: {speedup or 0:.3f}x over the default schedule (step {getattr(state, 'global_step', 0)})"
        if self.out_dir is not None:
            from megakernel_gym.env.timeline import save_png
            self.out_dir.mkdir(parents=True, exist_ok=True)
            save_png(img, str(self.out_dir / "best_megakernel_timeline.png"))
        try:
            import wandb
            if wandb.run is not None:
                wandb.log({"env/best_megakernel_timeline": wandb.Image(img, caption=caption)}, commit=False)
        except ImportError:
            pass

    def close(self) -> None:
        for env in self.envs:
            env.close()
        if self._own_pool and self._pool is not None:
            self._pool.close()


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
    from trl import GRPOConfig
    if "/" in model or os.sep in model or model.startswith("."):
        if not Path(model).exists():
            raise TrainConfigError(f"model path {model!r} does not exist; give a folder with config.json and "
                                   "weights (save_pretrained), or a model name your Hugging Face cache holds")
    own, grpo = load_config(config)
    from trl import GRPOTrainer  # noqa: F401  (before WANDB_MODE: transformers prints a line at import under offline)
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
    from megakernel_gym.policies.quiet import library_noise_off
    with library_noise_off():
        return _train_grpo(model, own, grpo, GRPOConfig(**grpo), resume)


def _train_grpo(model: str, own: dict, grpo: dict, args, resume: bool):
    from trl import GRPOTrainer
    curriculum, callbacks = None, []
    if own["curriculum"]:
        if own["multi_turn"]:
            raise TrainConfigError("curriculum = true is for single-turn training; set multi_turn = false, or name "
                                   "the problems (problems, levels, split) for multi-turn")
        from transformers.trainer_utils import get_last_checkpoint
        last = get_last_checkpoint(grpo["output_dir"]) if resume and Path(grpo["output_dir"]).is_dir() else None
        curriculum, train_dataset = curriculum_dataset(own, last)
        callbacks.append(curriculum_callback(curriculum))
    else:
        train_dataset = prompt_dataset(own)
    try:
        reward = EnvReward(own["backend"], curriculum=curriculum, out_dir=grpo["output_dir"], pool=own["pool"])
    except ValueError as e:
        raise TrainConfigError(f"{e} (the config's `pool`)") from e
    try:
        if own["multi_turn"]:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(model)
            if not tok.chat_template:
                raise TrainConfigError(f"the tokenizer of {model!r} has no chat template; multi-turn training calls "
                                       "the env's tools, which needs one that supports tool calls (Qwen3's, Llama 3's; "
                                       "make_tiny_model(..., chat=True) for a tiny one), or set multi_turn = false")
            trainer = GRPOTrainer(model=model, reward_funcs=None, args=args, train_dataset=train_dataset,
                                  processing_class=tok, environment_factory=tool_env_class(own["backend"]))
        else:
            trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=train_dataset,
                                  callbacks=callbacks)
        trainer.curriculum = curriculum
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


__all__ = ["train_grpo", "load_config", "prompt_dataset", "curriculum_dataset", "CurriculumPrompts", "EnvReward",
           "TrainConfigError", "OWN_KEYS", "tool_env_class"]
