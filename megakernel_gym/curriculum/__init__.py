"""Problems: the built-in suite (problems/, each with a reference candidate in references/).

The full suite, loaders and levels come with the curriculum issue; this is the registry the
judge's CLI and tests use.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from megakernel_gym.rewards.problem import Candidate, Problem, ProblemError

_PKG = resources.files("megakernel_gym.curriculum")


def builtin_names() -> list[str]:
    return sorted(p.name[:-3] for p in (_PKG / "problems").iterdir()
                  if p.name.endswith(".py") and not p.name.startswith("_"))


def get_problem(name: str) -> Problem:
    path = _PKG / "problems" / f"{name}.py"
    if not path.is_file():
        raise ProblemError(f"no built-in problem {name!r}; built-ins: {', '.join(builtin_names())}")
    return Problem.from_source(path.read_text(), name=name, path=str(path))


def reference_candidates(name: str) -> dict[str, Candidate]:
    """The shipped correct candidates for a built-in problem: {"triton": ..., "cuda": ...}."""
    out = {}
    for kind, fname in (("triton", f"{name}.py"), ("cuda", f"{name}_cuda.py")):
        p = _PKG / "references" / fname
        if p.is_file():
            out[kind] = Candidate(p.read_text(), str(p))
    return out


def load_problem(spec: str) -> Problem:
    """A path to a KernelBench-format file, or a built-in name."""
    if spec.endswith(".py") or "/" in spec or Path(spec).is_file():
        return Problem.from_file(spec)
    return get_problem(spec)


__all__ = ["builtin_names", "get_problem", "load_problem", "reference_candidates"]
