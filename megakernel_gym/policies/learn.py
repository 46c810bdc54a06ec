"""A small learned policy over the edit menu, trained from scratch with REINFORCE on the sim.

    policy, curve = train_menu_policy(["mlp-1b", "llama-tiny"], ["attention-1b"], episodes=200)

The policy is a softmax over the menu's edits (baselines.edit_menu) of a linear score of each
edit's features: its verb, the kind of op it targets, and which way it goes (tile larger or
smaller, counter op-wide or per tile, the kind of op a fusion feeds). An episode applies
`steps` sampled edits to a zoo model's default schedule (an edit the IR refuses changes nothing);
the return is the log of the predicted speedup over the default schedule (costmodel.predict with
the calibrated constants). The gradient is REINFORCE with a running-mean baseline. Held-out
models are scored with the greedy policy during training: the learning curve.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VERBS = ("tile", "counter", "prefetch", "fuse")
KINDS = ("matmul", "elementwise", "rmsnorm", "rope", "decode_attention", "cache_write", "embedding", "other")
DIRECTIONS = ("up", "down", "op", "tile", "on", "into_elementwise", "into_other")
N_FEATURES = len(VERBS) * len(KINDS) * len(DIRECTIONS)


def _resolve(ir, pattern: str) -> str | None:
    """One op a `layers.*.` pattern (or plain name) names."""
    name = pattern.replace("layers.*.", "layers.0.") if pattern.startswith("layers.*.") else pattern
    return name if name in ir.facts.info else None


def features(ir, edit: str) -> int:
    """The edit's feature index: (verb, target op kind, direction)."""
    from megakernel_gym.ir_exposure.ir import tile_size
    words = edit.split()
    verb = words[0]
    op = _resolve(ir, words[1])
    kind = ir.facts.info[op].op.kind if op else "other"
    kind = kind if kind in KINDS else "other"
    if verb == "tile":
        direction = "up" if int(words[2].split("=")[1]) > tile_size(ir.facts, ir.knobs, op) else "down"
    elif verb == "counter":
        direction = words[2]
    elif verb == "fuse":
        cons = _resolve(ir, words[3])
        direction = "into_elementwise" if cons and ir.facts.info[cons].op.kind == "elementwise" else "into_other"
    else:
        direction = "on"
    return (VERBS.index(verb) * len(KINDS) + KINDS.index(kind)) * len(DIRECTIONS) + DIRECTIONS.index(direction)


@dataclass
class MenuPolicy:
    theta: np.ndarray = field(default_factory=lambda: np.zeros(N_FEATURES))

    def distribution(self, ir) -> tuple[list[str], np.ndarray, np.ndarray]:
        from megakernel_gym.policies.baselines import edit_menu
        menu = edit_menu(ir)
        idx = np.array([features(ir, e) for e in menu])
        logits = self.theta[idx]
        p = np.exp(logits - logits.max())
        return menu, idx, p / p.sum()

    def choose(self, ir, rng: random.Random, greedy: bool = False) -> tuple[str, np.ndarray]:
        """(the edit, grad of its log-probability w.r.t. theta)."""
        menu, idx, p = self.distribution(ir)
        k = int(np.argmax(p)) if greedy else rng.choices(range(len(menu)), weights=p)[0]
        grad = -np.bincount(idx, weights=p, minlength=N_FEATURES)
        grad[idx[k]] += 1.0
        return menu[k], grad


def rollout(policy: MenuPolicy, ir0, steps: int, rng: random.Random, greedy: bool, device: str
            ) -> tuple[float, np.ndarray, list[str]]:
    """(log predicted speedup over the default schedule, summed log-prob gradient, edits applied)."""
    from megakernel_gym.compiler import predict
    from megakernel_gym.policies.baselines import try_edit
    base = predict(ir0.plan(), device).latency_us
    ir, grad, applied = ir0, np.zeros(N_FEATURES), []
    for _ in range(steps):
        edit, g = policy.choose(ir, rng, greedy)
        grad += g
        new = try_edit(ir, edit)
        if new is not None:
            ir = new
            applied.append(edit)
    return math.log(base / predict(ir.plan(), device).latency_us), grad, applied


def zoo_irs(names: list[str], num_sms: int = 132) -> dict[str, Any]:
    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.ir_exposure import make_ir
    return {n: make_ir(capture(*ZOO[n](device="meta"), n), num_sms=num_sms) for n in names}


def train_menu_policy(train: list[str], heldout: list[str], episodes: int = 200, steps: int = 3, lr: float = 0.5,
                      eval_every: int = 10, seed: int = 0, device: str = "H100", log=None
                      ) -> tuple[MenuPolicy, list[dict[str, Any]]]:
    """REINFORCE from scratch; returns the policy and the curve (held-out greedy score by episode)."""
    rng = random.Random(seed)
    train_irs, held_irs = zoo_irs(train), zoo_irs(heldout)
    policy, baseline, curve = MenuPolicy(), 0.0, []

    def evaluate(ep: int, returns: list[float]) -> None:
        held = {n: rollout(policy, ir, steps, rng, True, device) for n, ir in held_irs.items()}
        point = {"episode": ep, "train_return_mean": float(np.mean(returns[-eval_every:])) if returns else None,
                 "heldout_speedup": {n: math.exp(r) for n, (r, _, _) in held.items()},
                 "heldout_edits": {n: a for n, (_, _, a) in held.items()}}
        point["heldout_geomean_speedup"] = math.exp(float(np.mean([r for r, _, _ in held.values()])))
        curve.append(point)
        if log is not None:
            print(f"episode {ep:4d}: held-out geomean speedup {point['heldout_geomean_speedup']:.3f}x "
                  f"(train return {point['train_return_mean'] if returns else float('nan'):+.3f})", file=log, flush=True)

    returns: list[float] = []
    evaluate(0, returns)
    for ep in range(1, episodes + 1):
        name = rng.choice(train)
        r, grad, _ = rollout(policy, train_irs[name], steps, rng, False, device)
        returns.append(r)
        baseline += 0.1 * (r - baseline)
        policy.theta += lr * (r - baseline) * grad
        if ep % eval_every == 0:
            evaluate(ep, returns)
    return policy, curve


__all__ = ["MenuPolicy", "features", "rollout", "train_menu_policy", "zoo_irs", "N_FEATURES"]
