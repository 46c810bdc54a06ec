"""EvalResult: what the judge says about one candidate (the contract in DESIGN.md)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# not_run: the code compiled, but this backend cannot run it, so nothing was checked or timed (a
# megakernel plan with `impl` bodies on the sim or cpu backend: the bodies are scored on the gpu
# backend only); its reward is the failure tier's, never a positive one
STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected", "not_run")


@dataclass
class Flag:
    """One anti-cheat finding. `rule` is a stable name; `detail` says where and what."""
    rule: str
    detail: str
    line: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"{self.rule}{where}: {self.detail}"


@dataclass
class EvalResult:
    status: str
    reason: str
    problem: str
    backend: str
    candidate_sha256: str
    problem_sha256: str = ""
    device: str = ""
    speedup: float | None = None
    speedups: dict[str, float] = field(default_factory=dict)
    best_baseline: str | None = None  # the fastest correct baseline, the one `speedup` is over
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    timing: dict[str, Any] | None = None
    seeds: list[dict[str, Any]] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    category: str | None = None       # finer failure kind: syntax, crash, oom, no_gpu, ...
    compile_log: str | None = None
    log_tail: str | None = None
    elapsed_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds per judge phase
    # load_inline candidates: how each extension was built, "fast" (NVRTC + the host interpreter) or
    # "load_inline: <why the fast path could not take it>" (torch's own build)
    compile_paths: list[str] = field(default_factory=list)
    cached: bool = False
    judge_version: str = ""          # the judge that made it (rewards/version.py; "" before judges had one)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")
        self.flags = [f if isinstance(f, Flag) else Flag(**f) for f in self.flags]

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["correct"] = self.correct
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        d = dict(d)
        d.pop("correct", None)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def failure(cls, status: str, reason: str, problem, candidate_sha256: str, backend: str,
                **kw) -> "EvalResult":
        return cls(status=status, reason=reason, problem=problem.name, backend=backend,
                   candidate_sha256=candidate_sha256, problem_sha256=problem.sha256, **kw)
