"""Baseline policies for MegaKernel-v0, one interface, for leaderboards and as the floor a trained
policy must beat.

    policy = make_policy("search", seed=0)
    obs, info = env.reset(options={"problem": "mk_mlp_block"})
    policy.reset(env.unwrapped, obs, info)
    while True:
        obs, reward, term, trunc, info = env.step(policy.act(obs, info))
        if term or trunc: break

Level-5 (megakernel IR) policies:
- default: submits the compiler's default schedule as it is.
- random: a few edits drawn at random from the menu below, one per turn, then submits.
- heuristic: the compiler's tuned edits (fusions, op counters: ir_exposure.tuned_edits), then submits.
- expert: the expert schedule (policies/expert.py: the tuned edits plus the levers: norms inlined into
  their matmuls, attention split over its positions, q/k/v in one wave), then submits.
- search: greedy search over the menu, scored by the sim cost model (calibrated on an H100), one
  edit batch per round while the prediction improves; sends the best schedule it found, then
  submits. On the gpu backend the env then measures what the model predicted ("sim first, gpu
  to confirm").
- learned: the menu policy trained from scratch on the sim (policies/learn.py, weights made by
  `python bench/learning_sim.py`), played greedily: its edits as one batch, then submits.
- lm: the small transformer trained with TRL, SFT then GRPO on the sim (policies/lm.py, the model made
  by `python bench/learning_lm.py`); it reads only the observation text.
Op-level problems (levels 1-4): default submits no kernel; reference replays the problem's shipped
reference kernel where there is one (an upper bound for the harness, not a policy to learn from).

Baselines are privileged: they read the env's current IR object and device (`env.ir`,
`env.device`) instead of parsing the observation text. A learned policy sees only the text.
"""
from __future__ import annotations

import random
from typing import Any

from megakernel_gym.policies.menu import MENU_FACTORS, edit_menu, try_edit  # noqa: F401  (re-exported)


class Policy:
    """reset(env, obs, info) at the start of an episode, then act(obs, info) -> action text per turn."""
    name = "policy"
    kinds = ("edits", "code")

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.env = None
        self.turn = 0

    def reset(self, env, obs: dict, info: dict) -> None:
        self.env, self.turn, self.kind = env, 0, info["kind"]

    def act(self, obs: dict, info: dict) -> str:
        self.turn += 1
        return self.plan_turn(obs, info) or "submit"

    def plan_turn(self, obs: dict, info: dict) -> str | None:
        return None


class DefaultPolicy(Policy):
    name = "default"


class RandomPolicy(Policy):
    name = "random"

    def __init__(self, seed: int = 0, edits: int = 3):
        super().__init__(seed)
        self.edits = edits

    def plan_turn(self, obs, info):
        if self.kind != "edits" or self.turn > self.edits:
            return None
        menu = edit_menu(self.env.ir)
        self.rng.shuffle(menu)
        for text in menu:          # the first valid one: an invalid action teaches a baseline nothing
            if try_edit(self.env.ir, text) is not None:
                return text
        return None


class _OneBatchPolicy(Policy):
    """One edit batch, `batch(ir)`, on the first turn, then submits."""

    def batch(self, ir) -> str:
        raise NotImplementedError

    def plan_turn(self, obs, info):
        if self.kind != "edits" or self.turn > 1:
            return None
        return self.batch(self.env.ir) or None


class HeuristicPolicy(_OneBatchPolicy):
    name = "heuristic"

    def batch(self, ir) -> str:
        from megakernel_gym.ir_exposure import tuned_edits
        return tuned_edits(ir)


class ExpertPolicy(_OneBatchPolicy):
    """The expert schedule (policies/expert.py) as one edit batch, then submits: what the levers reach."""
    name = "expert"

    def batch(self, ir) -> str:
        from megakernel_gym.policies.expert import expert_edits
        return expert_edits(ir)


class SearchPolicy(Policy):
    """Greedy on the sim: from the heuristic's schedule, each round tries every menu edit, keeps
    the one the cost model predicts fastest, and stops when no edit gains `min_gain_us`."""
    name = "search"

    def __init__(self, seed: int = 0, rounds: int = 3, max_candidates: int = 80, min_gain_us: float = 0.5,
                 device: str | None = None):
        super().__init__(seed)
        self.rounds, self.max_candidates, self.min_gain_us, self.device = rounds, max_candidates, min_gain_us, device
        self.trace: list[dict[str, Any]] = []

    def search(self, ir) -> tuple[str, float, float]:
        """(the edit batch found, predicted us before, after)."""
        from megakernel_gym.compiler import predict
        from megakernel_gym.ir_exposure import tuned_edits
        device = self.device or getattr(self.env, "device", "H100")
        score = lambda x: predict(x.plan(), device).latency_us  # noqa: E731
        start = score(ir)
        batch = [tuned_edits(ir)] if tuned_edits(ir) else []
        cur = try_edit(ir, batch[0]) if batch else ir
        if cur is None:
            cur, batch = ir, []
        best = score(cur)
        self.trace = [{"round": 0, "edit": "tuned_edits" if batch else "", "predicted_us": best}]
        for r in range(1, self.rounds + 1):
            menu = edit_menu(cur)
            self.rng.shuffle(menu)
            found = None
            for text in menu[: self.max_candidates]:
                new = try_edit(cur, text)
                if new is not None:
                    s = score(new)
                    if s < best - self.min_gain_us and (found is None or s < found[0]):
                        found = (s, text, new)
            if found is None:
                break
            best, text, cur = found
            batch.append(text)
            self.trace.append({"round": r, "edit": text, "predicted_us": best})
        return "\n".join(batch), start, best

    def plan_turn(self, obs, info):
        if self.kind != "edits" or self.turn > 1:
            return None
        batch, _, _ = self.search(self.env.ir)
        return batch or None


class LearnedPolicy(Policy):
    name = "learned"

    def __init__(self, seed: int = 0, weights: str | None = None, steps: int = 3):
        from megakernel_gym.policies.learn import MenuPolicy
        super().__init__(seed)
        self.menu_policy, self.steps = MenuPolicy.load(weights), steps

    def plan_turn(self, obs, info):
        if self.kind != "edits" or self.turn > 1:
            return None
        return "\n".join(self.menu_policy.greedy_edits(self.env.ir, self.steps)) or None


class LMPolicy(Policy):
    """The small transformer trained with TRL (policies/lm.py, the model `python bench/learning_lm.py`
    saves; `model=` another folder), played greedily from the observation text alone: its decisions as
    one edit batch; when the env refuses an edit, that line is dropped and the rest sent again (the
    env's feedback names the edit); then submits."""
    name = "lm"

    def __init__(self, seed: int = 0, model: str | None = None, sample: bool = False):
        from megakernel_gym.policies.lm import LMGenerator
        super().__init__(seed)
        self.generate, self.sample, self.lines = LMGenerator(model), sample, None

    def reset(self, env, obs, info):
        super().reset(env, obs, info)
        self.lines = None

    def plan_turn(self, obs, info):
        import re
        from megakernel_gym.policies.lm import PolicyTextError, decisions_to_edits, policy_rows, prompt_of
        if self.kind != "edits":
            return None
        if self.lines is None:
            try:
                prompt, rows = prompt_of(obs["code"])
            except PolicyTextError:     # no IR text it can read: nothing to say but submit
                return None
            completion = self.generate(prompt, len(policy_rows(rows)), self.sample)
            self.lines = decisions_to_edits(rows, completion).splitlines()
            return "\n".join(self.lines) or None
        m = re.search(r"\bedit (\d+) \(`", obs["feedback"])
        if not m or "No edit was applied" not in obs["feedback"] or not 1 <= int(m.group(1)) <= len(self.lines):
            return None                 # accepted (or refused as a whole): submit
        del self.lines[int(m.group(1)) - 1]
        return "\n".join(self.lines) or None


class ReferencePolicy(Policy):
    name = "reference"

    def plan_turn(self, obs, info):
        if self.kind != "code" or self.turn > 1:
            return None
        from megakernel_gym.curriculum import reference_candidates
        refs = reference_candidates(self.env.problem.name)
        cand = refs.get("triton") or refs.get("cuda")
        return f"```python\n{cand.source}\n```" if cand else None


POLICIES = {p.name: p for p in (DefaultPolicy, RandomPolicy, HeuristicPolicy, ExpertPolicy, SearchPolicy, LearnedPolicy,
                                LMPolicy, ReferencePolicy)}


def make_policy(name: str, seed: int = 0, **kw) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; one of {', '.join(POLICIES)}")
    return POLICIES[name](seed=seed, **kw)


__all__ = ["Policy", "DefaultPolicy", "RandomPolicy", "HeuristicPolicy", "ExpertPolicy", "SearchPolicy", "LearnedPolicy",
           "LMPolicy", "ReferencePolicy",
           "POLICIES", "make_policy", "edit_menu", "try_edit"]
