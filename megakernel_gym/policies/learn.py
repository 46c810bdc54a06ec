"""A small learned policy over the edit menu, trained from scratch with REINFORCE on the sim.

    policy, curve = train_menu_policy(["mlp-1b", "llama-tiny"], ["attention-1b"], episodes=200)

The policy is a softmax over the menu's edits (menu.edit_menu) of a linear score of each
edit's features: its verb, the kind of op it targets, and which way it goes (tile larger or
smaller, counter op-wide or per tile, the kind of op a fusion feeds). An episode applies
`steps` sampled edits to a zoo model's default schedule (an edit the IR refuses changes nothing);
the return is the log of the predicted speedup over the default schedule (costmodel.predict with
the calibrated constants). The gradient is REINFORCE with a running-mean baseline. Held-out
models are scored with the greedy policy during training: the learning curve.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

VERBS = ("tile", "counter", "prefetch", "fuse")
KINDS = ("matmul", "elementwise", "rmsnorm", "rope", "decode_attention", "cache_write", "embedding", "other")
DIRECTIONS = ("up", "down", "op", "tile", "on", "into_elementwise", "into_other")
N_FEATURES = len(VERBS) * len(KINDS) * len(DIRECTIONS)
# the weights `mkgym eval --policy learned` plays: written by `python bench/learning_sim.py`
SHIPPED_WEIGHTS = Path(__file__).with_name("menu_policy.json")


def _resolve(ir, pattern: str) -> str | None:
    """One op a `layers.*.` pattern (or plain name) names."""
    name = pattern.replace("layers.*.", "layers.0.") if pattern.startswith("layers.*.") else pattern
    return name if name in ir.facts.info else None


def features(ir, edit: str) -> int:
    """The edit's feature index: (verb, target op kind, direction)."""
    from megakernel_gym.compiler.legality import tile_size
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
        from megakernel_gym.policies.menu import edit_menu
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

    def save(self, path: str | Path, **provenance) -> None:
        """theta with the feature layout it indexes (a file from another layout is refused on load)."""
        doc = {"features": {"verbs": VERBS, "kinds": KINDS, "directions": DIRECTIONS},
               "theta": [round(float(t), 6) for t in self.theta], **provenance}
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path | None = None) -> "MenuPolicy":
        path = Path(path or SHIPPED_WEIGHTS)
        if not path.is_file():
            raise FileNotFoundError(f"menu-policy weights {str(path)!r} do not exist; train them with "
                                    "`python bench/learning_sim.py --save PATH`")
        doc = json.loads(path.read_text())
        layout = {"verbs": list(VERBS), "kinds": list(KINDS), "directions": list(DIRECTIONS)}
        if doc.get("features") != layout or len(doc.get("theta", [])) != N_FEATURES:
            raise ValueError(f"menu-policy weights {str(path)!r} index another feature layout than this version's "
                             f"{layout}; train them again with `python bench/learning_sim.py --save {path}`")
        return cls(np.array(doc["theta"], dtype=float))

    def greedy_edits(self, ir0, steps: int = 3) -> list[str]:
        """The edits a greedy rollout applies (the held-out score's edits): `steps` picks, each applied
        where the IR takes it."""
        return rollout(self, ir0, steps, random.Random(0), True, None)[2]


def episode(policy: MenuPolicy, ir0, steps: int, rng: random.Random, greedy: bool, device: str | None
            ) -> tuple[list[tuple[np.ndarray, float]], list[str]]:
    """([(grad of the step's log-probability, the step's reward)], edits applied). A step's reward is
    the log of its predicted speedup (latency before / after; 0 for an edit the IR refuses; no
    predictions when device is None). Sampled steps may pick an edit the IR refuses, a no-op the
    policy learns to avoid; a greedy step takes the likeliest edit the IR accepts."""
    from megakernel_gym.compiler import predict
    from megakernel_gym.policies.menu import try_edit
    ir, trace, applied = ir0, [], []
    lat = predict(ir0.plan(), device).latency_us if device else 0.0
    for _ in range(steps):
        if greedy:
            menu, idx, p = policy.distribution(ir)
            new, k = None, -1
            for k in np.argsort(-p, kind="stable"):
                new = try_edit(ir, menu[k])
                if new is not None:
                    break
            if new is None:
                break
            edit, g = menu[k], np.zeros(N_FEATURES)
        else:
            edit, g = policy.choose(ir, rng)
            new = try_edit(ir, edit)
        r = 0.0
        if new is not None:
            ir = new
            applied.append(edit)
            if device:
                before, lat = lat, predict(ir.plan(), device).latency_us
                r = math.log(before / lat)
        trace.append((g, r))
    return trace, applied


def rollout(policy: MenuPolicy, ir0, steps: int, rng: random.Random, greedy: bool, device: str | None
            ) -> tuple[float, np.ndarray, list[str]]:
    """(log predicted speedup over the default schedule, summed log-prob gradient, edits applied)."""
    trace, applied = episode(policy, ir0, steps, rng, greedy, device)
    return sum(r for _, r in trace), sum((g for g, _ in trace), np.zeros(N_FEATURES)), applied


def zoo_irs(names: list[str], num_sms: int = 132) -> dict[str, Any]:
    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.ir_exposure import make_ir
    return {n: make_ir(capture(*ZOO[n](device="meta"), n), num_sms=num_sms) for n in names}


def train_menu_policy(train: list[str], heldout: list[str], episodes: int = 200, steps: int = 3, lr: float = 0.5,
                      eval_every: int = 10, seed: int = 0, device: str = "H100", log=None
                      ) -> tuple[MenuPolicy, list[dict[str, Any]]]:
    """REINFORCE from scratch with reward-to-go (each edit is credited with what it and the edits
    after it gained, not what came before) and a running-mean baseline per model and step (models'
    gains differ in scale); returns the policy and the curve (held-out greedy score by episode)."""
    rng = random.Random(seed)
    train_irs, held_irs = zoo_irs(train), zoo_irs(heldout)
    policy, curve = MenuPolicy(), []
    baselines = {(n, t): 0.0 for n in train for t in range(steps)}

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
        trace, _ = episode(policy, train_irs[name], steps, rng, False, device)
        returns.append(sum(r for _, r in trace))
        to_go = np.cumsum([r for _, r in trace][::-1])[::-1]
        for t, ((grad, _), g) in enumerate(zip(trace, to_go)):
            b = baselines[(name, t)]
            baselines[(name, t)] = b + 0.1 * (g - b)
            policy.theta += lr * (g - b) * grad
        if ep % eval_every == 0:
            evaluate(ep, returns)
    return policy, curve


__all__ = ["MenuPolicy", "features", "episode", "rollout", "train_menu_policy", "zoo_irs", "N_FEATURES", "SHIPPED_WEIGHTS"]
