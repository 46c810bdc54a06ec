"""Problems and the curriculum over them.

  problems/, references/   the built-in suite (KernelBench-format files) and shipped candidates
  suite.py                 suites from the built-ins, KernelBench-layout folders, `datasets`
  check.py                 `mkgym problems check`: robust-kbench filters and self-tests
  curriculum.py            levels, sampling, promotion, saved state
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from megakernel_gym.curriculum.suite import (LoadError, Suite, SuiteError, builtin_suite, load_dataset_suite,
                                             load_kernelbench_dir, load_suite, split_of)
from megakernel_gym.rewards.problem import Candidate, Problem, ProblemError

_PKG = resources.files("megakernel_gym.curriculum")


def builtin_names() -> list[str]:
    return sorted(p.name[:-3] for p in (_PKG / "problems").iterdir()
                  if p.name.endswith(".py") and not p.name.startswith("_"))


def get_problem(name: str) -> Problem:
    path = _PKG / "problems" / f"{name}.py"
    if not path.is_file():
        import difflib
        names = builtin_names()
        near = list(dict.fromkeys(difflib.get_close_matches(name, names, n=3, cutoff=0.6)
                                  + [n for n in names if name.lower() in n]))[:6]
        raise ProblemError(f"no built-in problem {name!r}; "
                           + (f"did you mean {', '.join(near)}? " if near else "")
                           + "`mkgym problems list` shows them all")
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


__all__ = ["builtin_names", "get_problem", "load_problem", "reference_candidates", "Suite", "SuiteError",
           "LoadError", "builtin_suite", "load_suite", "load_kernelbench_dir", "load_dataset_suite", "split_of"]
