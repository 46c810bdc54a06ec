"""The curriculum: which problem next, and when the policy moves up a level.

    cur = Curriculum.from_file("my_curriculum.toml")     # or Curriculum() for default.toml
    draw = cur.sample()                  # a training problem of the current level (or a review)
    cur.record(draw.problem, result)     # an EvalResult, its dict, or a bool
    for d in cur.heldout():              # now and then: the level's held-out problems
        cur.record(d.problem, evaluate(d), heldout=True)   # may promote
    cur.save("state.json"); Curriculum.load("state.json")  # resume where training stopped
    wandb.log(cur.metrics())

Promotion follows DRTriton (move up once held-out pass@1 passes about 50%) with an optional
milestone (CUDA Agent: beat eager, then beat torch.compile). Sampling favours problems with
intermediate solve rates, since GRPO groups that all fail or all pass carry no signal.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from collections import deque
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from megakernel_gym.curriculum.suite import Suite, load_suite, split_of

MILESTONES = ("none", "beats_eager", "beats_compile")
STATE_FORMAT = "mkgym-curriculum"
STATE_VERSION = 1
TRAIN_WINDOW = 100   # recent training episodes per level kept for the train metrics


class CurriculumError(ValueError):
    """A bad curriculum config or state file; the message names the file and the fix."""


@dataclass(frozen=True)
class LevelConfig:
    level: int
    turns: int = 10
    window: int = 20
    min_heldout: int = 10
    promote_pass_rate: float = 0.5
    promote_milestone: str = "none"
    promote_milestone_rate: float = 0.0


@dataclass(frozen=True)
class CurriculumConfig:
    levels: tuple[LevelConfig, ...]
    suite: str = "builtin"
    start_level: int = 1
    seed: int = 0
    floor: float = 0.02
    prior_solves: float = 1.0
    prior_attempts: float = 2.0
    review: float = 0.15
    source: str = "<dict>"

    @classmethod
    def default(cls) -> "CurriculumConfig":
        f = resources.files("megakernel_gym.curriculum") / "default.toml"
        return cls.from_toml(f.read_text(), source=str(f))

    @classmethod
    def from_file(cls, path: str | Path) -> "CurriculumConfig":
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise CurriculumError(f"cannot read curriculum config {str(path)!r}: {e}") from e
        return cls.from_toml(text, source=str(path))

    @classmethod
    def from_toml(cls, text: str, source: str = "<toml>") -> "CurriculumConfig":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise CurriculumError(f"{source}: not valid TOML ({e}); compare with the shipped default.toml") from e
        return cls.from_dict(data, source)

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>") -> "CurriculumConfig":
        data = dict(data)
        sampling = data.pop("sampling", {}) or {}
        raw_levels = data.pop("levels", None)
        top = {f.name for f in fields(cls)} - {"levels", "source", "floor", "prior_solves", "prior_attempts",
                                                 "review"}
        samp = {"floor", "prior_solves", "prior_attempts", "review"}
        _unknown(data, top, source, "")
        _unknown(sampling, samp, source, "[sampling] ")
        if not raw_levels or not isinstance(raw_levels, list):
            raise CurriculumError(f"{source}: no [[levels]] tables; a curriculum needs at least one level "
                                  "(see default.toml)")
        lvl_keys = {f.name for f in fields(LevelConfig)}
        levels = []
        for i, lv in enumerate(raw_levels):
            if not isinstance(lv, dict) or "level" not in lv:
                raise CurriculumError(f"{source}: [[levels]] entry {i + 1} has no `level = N`")
            _unknown(lv, lvl_keys, source, f"[[levels]] {lv['level']}: ")
            try:
                levels.append(_typed(LevelConfig, lv))
            except (TypeError, ValueError) as e:
                raise CurriculumError(f"{source}: [[levels]] {lv.get('level')}: {e}") from e
        nums = [lv.level for lv in levels]
        if nums != sorted(set(nums)):
            raise CurriculumError(f"{source}: levels must be listed once each in increasing order, got {nums}")
        for lv in levels:
            if lv.promote_milestone not in MILESTONES:
                raise CurriculumError(f"{source}: level {lv.level}: promote_milestone {lv.promote_milestone!r} "
                                      f"is not one of {', '.join(MILESTONES)}")
            if not (0 <= lv.promote_pass_rate <= 1 and 0 <= lv.promote_milestone_rate <= 1):
                raise CurriculumError(f"{source}: level {lv.level}: rates must lie in [0, 1]")
            if lv.turns < 1 or lv.window < 1 or lv.min_heldout < 1 or lv.min_heldout > lv.window:
                raise CurriculumError(f"{source}: level {lv.level}: need turns >= 1 and 1 <= min_heldout <= window")
        try:
            cfg = _typed(cls, {**data, **sampling, "levels": tuple(levels), "source": source})
        except (TypeError, ValueError) as e:
            raise CurriculumError(f"{source}: {e}") from e
        if cfg.start_level not in nums:
            raise CurriculumError(f"{source}: start_level {cfg.start_level} is not one of the levels {nums}")
        if not 0 <= cfg.review < 1 or cfg.floor <= 0 or cfg.prior_attempts <= 0:
            raise CurriculumError(f"{source}: need 0 <= review < 1, floor > 0, prior_attempts > 0")
        return cfg

    def level(self, n: int) -> LevelConfig:
        return next(lv for lv in self.levels if lv.level == n)

    @property
    def sha256(self) -> str:
        d = asdict(self)
        d.pop("source")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _unknown(d: dict, allowed: set, source: str, where: str) -> None:
    bad = sorted(set(d) - allowed)
    if bad:
        raise CurriculumError(f"{source}: {where}unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(allowed))}")


def _typed(cls, d: dict):
    """Construct a config dataclass, checking each value against the field's type."""
    kinds = {"int": int, "float": (int, float), "str": str}
    for f in fields(cls):
        want = kinds.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        if f.name in d and want and (not isinstance(d[f.name], want) or isinstance(d[f.name], bool)):
            raise TypeError(f"{f.name} must be {f.type}, got {d[f.name]!r}")
    return cls(**d)


@dataclass(frozen=True)
class Outcome:
    """What one episode (or held-out evaluation) says about the policy."""
    correct: bool
    speedup: float | None = None
    beats_eager: bool = False
    beats_compile: bool = False

    @classmethod
    def of(cls, result: Any) -> "Outcome":
        """From an EvalResult, its dict (`to_dict()` / `mkgym judge --json`), a bool, or an Outcome."""
        if isinstance(result, Outcome):
            return result
        if isinstance(result, bool):
            return cls(result)
        d = result if isinstance(result, dict) else getattr(result, "__dict__", None)
        if not isinstance(d, dict) or "correct" not in d and "status" not in d:
            raise TypeError(f"cannot read an outcome from {type(result).__name__}; pass an EvalResult, its dict "
                            "or a bool")
        correct = bool(d.get("correct", d.get("status") == "correct"))
        sp = d.get("speedups") or {}
        return cls(correct, d.get("speedup") if correct else None,
                   correct and (sp.get("eager") or 0) > 1.0, correct and (sp.get("torch_compile") or 0) > 1.0)

    def milestone(self, name: str) -> bool:
        return True if name == "none" else bool(getattr(self, name))


def _share(window, pred) -> float:
    """The share of a (non-empty) window of outcomes for which pred holds."""
    return sum(1 for o in window if pred(o)) / len(window)


@dataclass(frozen=True)
class Draw:
    problem: str
    level: int
    turns: int
    split: str          # the problem's split: train, or heldout for an evaluation
    review: bool = False   # drawn from a level already passed


class Curriculum:
    """Levels over a suite, a sampler, promotion, and a state that saves and restores."""

    def __init__(self, config: CurriculumConfig | str | Path | None = None, suite: Suite | None = None):
        if config is None:
            config = CurriculumConfig.default()
        elif not isinstance(config, CurriculumConfig):
            config = CurriculumConfig.from_file(config)
        self.config = config
        self.suite = suite if suite is not None else load_suite(config.suite)
        self.pools: dict[int, dict[str, list[str]]] = {}
        for lv in config.levels:
            sub = self.suite.filter(level=lv.level)
            train = [p.name for p in sub if split_of(p) == "train"]
            held = [p.name for p in sub if split_of(p) == "heldout"]
            if train or held:
                # a level with no held-out problems is judged on its training problems (said in show())
                self.pools[lv.level] = {"train": train or held, "heldout": held or train}
        if not self.pools:
            raise CurriculumError(f"{config.source}: the suite {self.suite.name} has no problems at levels "
                                  f"{[lv.level for lv in config.levels]}")
        self.active = [lv.level for lv in config.levels if lv.level in self.pools]
        start = config.start_level if config.start_level in self.pools else self.active[0]
        self.level = start
        self.episodes = 0
        self.stats: dict[str, list[float]] = {}             # problem -> [attempts, solves]
        self.train: dict[int, deque] = {lv: deque(maxlen=TRAIN_WINDOW) for lv in self.active}
        self.held: dict[int, deque] = {lv: deque(maxlen=config.level(lv).window) for lv in self.active}
        self.promotions: list[dict[str, int]] = []
        self.rng = np.random.default_rng(config.seed)

    @classmethod
    def from_file(cls, path: str | Path, suite: Suite | None = None) -> "Curriculum":
        return cls(CurriculumConfig.from_file(path), suite)

    # -- drawing problems ----------------------------------------------------------------
    def turns(self, level: int | None = None) -> int:
        return self.config.level(level or self.level).turns

    def solve_rate(self, name: str) -> float:
        a, s = self.stats.get(name, (0.0, 0.0))
        c = self.config
        return (s + c.prior_solves) / (a + c.prior_attempts)

    def weight(self, name: str) -> float:
        p = self.solve_rate(name)
        return self.config.floor + p * (1.0 - p)

    def sample(self, level: int | None = None, rng: np.random.Generator | None = None) -> Draw:
        """A training problem: of the current level, or (share `review`) of a level passed.
        `level` pins the level; `rng` draws with the caller's generator (an env's np_random)."""
        rng = rng if rng is not None else self.rng
        review = False
        if level is None:
            passed = [lv for lv in self.active if lv < self.level]
            level = self.level
            review = bool(passed) and rng.random() < self.config.review
            if review:
                level = passed[int(rng.integers(len(passed)))]
        elif level not in self.pools:
            raise CurriculumError(f"level {level} is not one of this curriculum's levels {self.active}")
        names = self.pools[level]["train"]
        w = np.array([self.weight(n) for n in names])
        name = names[int(rng.choice(len(names), p=w / w.sum()))]
        return Draw(name, level, self.turns(level), "train", review)

    def heldout(self, n: int | None = None) -> list[Draw]:
        """The current level's held-out problems to evaluate (all of them, or n drawn at random)."""
        names = list(self.pools[self.level]["heldout"])
        if n is not None and n < len(names):
            names = [names[i] for i in sorted(self.rng.choice(len(names), size=n, replace=False))]
        return [Draw(x, self.level, self.turns(), "heldout") for x in names]

    # -- learning from outcomes ----------------------------------------------------------
    def level_of(self, name: str) -> int:
        lv = self.suite.get(name).level
        if lv not in self.pools:
            raise CurriculumError(f"problem {name!r} is at level {lv}, which this curriculum does not use")
        return lv

    def record(self, problem: str, result: Any, heldout: bool = False) -> bool:
        """Take one outcome; returns True when it promoted the policy to the next level."""
        out = Outcome.of(result)
        level = self.level_of(problem)
        if not heldout:
            self.episodes += 1
            a, s = self.stats.get(problem, (0.0, 0.0))
            self.stats[problem] = [a + 1, s + (1 if out.correct else 0)]
            self.train[level].append(out)
            return False
        self.held[level].append(out)
        return self._maybe_promote()

    def _maybe_promote(self) -> bool:
        lc = self.config.level(self.level)
        window = self.held[self.level]
        nxt = [lv for lv in self.active if lv > self.level]
        if not nxt or len(window) < lc.min_heldout:
            return False
        rate = _share(window, lambda o: o.correct)
        mile = _share(window, lambda o: o.milestone(lc.promote_milestone))
        if rate >= lc.promote_pass_rate and mile >= lc.promote_milestone_rate:
            self.promotions.append({"from": self.level, "to": nxt[0], "episode": self.episodes})
            self.level = nxt[0]
            return True
        return False

    # -- reporting -----------------------------------------------------------------------
    def metrics(self, prefix: str = "curriculum/") -> dict[str, float]:
        """Flat numbers per level, ready for wandb.log / TRL's log_metric."""
        m: dict[str, float] = {f"{prefix}level": float(self.level), f"{prefix}episodes": float(self.episodes),
                               f"{prefix}promotions": float(len(self.promotions))}
        for lv in self.active:
            for kind, window in (("train", self.train[lv]), ("heldout", self.held[lv])):
                if not window:
                    continue
                k = f"{prefix}L{lv}/{kind}_"
                m[k + "pass_rate"] = _share(window, lambda o: o.correct)
                m[k + "fast_1"] = _share(window, lambda o: o.correct and (o.speedup or 0) > 1)
                m[k + "beats_eager"] = _share(window, lambda o: o.beats_eager)
                m[k + "beats_compile"] = _share(window, lambda o: o.beats_compile)
                sps = [o.speedup for o in window if o.correct and o.speedup]
                if sps:
                    m[k + "geomean_speedup"] = math.exp(sum(math.log(s) for s in sps) / len(sps))
                m[k + "n"] = float(len(window))
        return m

    def summary(self) -> dict[str, Any]:
        """What `mkgym curriculum show` prints: per level its pools, turn limit, promotion rule and progress."""
        rows = []
        for lv in self.active:
            lc, pool, window = self.config.level(lv), self.pools[lv], self.held[lv]
            rows.append({"level": lv, "turns": lc.turns, "train": len(pool["train"]),
                         "heldout": len(pool["heldout"]),
                         "heldout_is_train": pool["heldout"] == pool["train"],
                         "rule": f"held-out pass >= {lc.promote_pass_rate:.0%} over the last {lc.window} "
                                 f"(at least {lc.min_heldout})"
                                 + (f", {lc.promote_milestone} >= {lc.promote_milestone_rate:.0%}"
                                    if lc.promote_milestone != "none" else ""),
                         "heldout_seen": len(window),
                         "heldout_pass_rate": _share(window, lambda o: o.correct) if window else None,
                         "current": lv == self.level})
        return {"config": self.config.source, "suite": self.suite.name, "level": self.level,
                "episodes": self.episodes, "promotions": self.promotions, "levels": rows}

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        enc = lambda w: [[o.correct, o.speedup, o.beats_eager, o.beats_compile] for o in w]  # noqa: E731
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "config_sha256": self.config.sha256,
                "config": self.config.source, "suite": self.suite.name, "level": self.level,
                "episodes": self.episodes, "stats": self.stats, "promotions": self.promotions,
                "train": {str(k): enc(v) for k, v in self.train.items()},
                "heldout": {str(k): enc(v) for k, v in self.held.items()},
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any], source: str = "<state>") -> None:
        fix = "; delete it to start from the first level, or pass a file written by Curriculum.save"
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CurriculumError(f"{source}: not a megakernel-gym curriculum state{fix}")
        if state.get("version") != STATE_VERSION:
            raise CurriculumError(f"{source}: state version {state.get('version')!r}, this megakernel-gym "
                                  f"reads version {STATE_VERSION}{fix}")
        try:
            level = int(state["level"])
            if level not in self.pools:
                raise CurriculumError(f"{source}: saved level {level} is not a level of this curriculum "
                                      f"({self.active}); was it saved with another config?")
            dec = lambda rows: [Outcome(bool(c), s, bool(e), bool(k)) for c, s, e, k in rows]  # noqa: E731
            train = {int(k): dec(v) for k, v in state["train"].items()}
            held = {int(k): dec(v) for k, v in state["heldout"].items()}
            stats = {str(k): [float(v[0]), float(v[1])] for k, v in state["stats"].items()}
            rng = np.random.default_rng()
            rng.bit_generator.state = state["rng"]
            promotions = [dict(p) for p in state["promotions"]]
            episodes = int(state["episodes"])
        except CurriculumError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise CurriculumError(f"{source}: damaged curriculum state ({type(e).__name__}: {e}){fix}") from e
        self.level, self.episodes, self.stats, self.promotions, self.rng = level, episodes, stats, promotions, rng
        for lv in self.active:
            self.train[lv] = deque(train.get(lv, []), maxlen=TRAIN_WINDOW)
            self.held[lv] = deque(held.get(lv, []), maxlen=self.config.level(lv).window)

    def save(self, path: str | Path) -> None:
        """Atomically: a crash mid-save leaves the previous state file whole."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.state_dict(), indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, config: CurriculumConfig | str | Path | None = None,
             suite: Suite | None = None) -> "Curriculum":
        try:
            state = json.loads(Path(path).read_text())
        except OSError as e:
            raise CurriculumError(f"cannot read curriculum state {str(path)!r}: {e}") from e
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CurriculumError(f"{path}: the curriculum state is not valid JSON ({e}); delete it to start "
                                  "from the first level, or pass a file written by Curriculum.save") from e
        cur = cls(config, suite)
        cur.load_state_dict(state, source=str(path))
        return cur


__all__ = ["Curriculum", "CurriculumConfig", "CurriculumError", "Draw", "LevelConfig", "MILESTONES", "Outcome"]
