"""`mkgym problems check`: refuse problems that reward trivial kernels, with the reason.

Two layers. Metadata (here, from the file's literals, nothing runs): a built-in must say its
level, op type, tags, description, CPU sizes and roofline counts. Behaviour (in the judge's
reference worker, since problem code is untrusted): the robust-kbench filters and the
self-test in rewards/filters.py, on the same seeds and input transforms the judge uses.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from megakernel_gym.rewards.problem import Problem, ProblemError

LEVELS = (1, 2, 3, 4, 5)
REQUIRED_BUILTIN_META = ("LEVEL", "OP_TYPE", "DESCRIPTION", "TAGS", "DTYPES")


@dataclass
class CheckReport:
    problem: str
    ok: bool
    reasons: list[str] = field(default_factory=list)     # why it was refused, one line each
    checks: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    backend: str = ""
    elapsed_s: float | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.ok:
            applied = sum(1 for c in self.checks if c.get("ok") is not None)
            return f"ok      {self.problem}  ({applied} checks)"
        return f"REFUSED {self.problem}: " + "; ".join(self.reasons)


def metadata_problems(problem: Problem, strict: bool) -> list[str]:
    """What the file's literal metadata lacks. `strict` for the built-in suite."""
    meta, out = problem.meta, []
    level = meta.get("LEVEL")
    if level is not None and level not in LEVELS:
        out.append(f"LEVEL = {level!r} is not one of {LEVELS}")
    if "DTYPES" in meta and not (isinstance(meta["DTYPES"], list) and all(isinstance(d, str) for d in meta["DTYPES"])):
        out.append("DTYPES must be a list of dtype names such as ['bfloat16']")
    if "TAGS" in meta and not (isinstance(meta["TAGS"], (list, tuple)) and all(isinstance(t, str) for t in meta["TAGS"])):
        out.append("TAGS must be a list of strings")
    if strict:
        missing = [k for k in REQUIRED_BUILTIN_META if k not in meta]
        if missing:
            out.append(f"missing metadata {', '.join(missing)} (a built-in problem sets each as a literal)")
        if "CPU_SIZES" not in problem.source:
            out.append("no CPU_SIZES: the cpu backend would run the GPU sizes")
    return out


def check_problem(problem: Problem, judge, strict: bool = False) -> CheckReport:
    """Run every check on one problem with a warm judge (any backend)."""
    import time
    t0 = time.perf_counter()
    report = CheckReport(problem=problem.name, ok=False, backend=judge.backend, path=problem.path)
    report.reasons = metadata_problems(problem, strict)
    try:
        got = judge.check_problem(problem)
    except ProblemError as e:
        report.reasons.append(_first_lines(str(e)))
        report.elapsed_s = round(time.perf_counter() - t0, 3)
        return report
    meta = got["meta"]
    if strict:
        for k in ("flops", "bytes"):
            if not meta.get(k):
                report.reasons.append(f"no {k.upper()}() (or it returned 0): the roofline needs it")
    report.checks, report.outputs = got["checks"], got["outputs"]
    report.reasons += [f"{c['name']}: {c['detail']}" for c in report.checks if c.get("ok") is False]
    report.ok = not report.reasons
    report.elapsed_s = round(time.perf_counter() - t0, 3)
    return report


def check_problems(problems: Iterable[Problem], backend: str = "cpu", strict: bool = False,
                   progress: bool = True, on_report=None) -> list[CheckReport]:
    """Check many problems with one judge (one reference worker), a progress bar on stderr;
    `on_report(report)` sees each report as it is made (a long run can record as it goes)."""
    from megakernel_gym.rewards.judge import Judge
    problems = list(problems)
    reports = []
    with Judge(backend=backend, store=False, use_cache=False) as judge:
        it = problems
        if progress:
            from tqdm import tqdm  # the progress bar library people already have
            it = tqdm(problems, desc="checking problems", unit="problem", leave=False)
        for p in it:
            reports.append(check_problem(p, judge, strict=strict))
            if on_report is not None:
                on_report(reports[-1])
    return reports


def _first_lines(text: str, n: int = 12) -> str:
    """A traceback's useful end: the last n lines."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:2] + (["..."] if len(lines) > n + 2 else []) + lines[-n:]) if len(lines) > n + 2 \
        else "\n".join(lines)


__all__ = ["CheckReport", "check_problem", "check_problems", "metadata_problems"]
