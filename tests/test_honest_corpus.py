"""The honest corpus: Triton candidates written the way a careful engineer (or a model) would,
every one correct. The judge must never reject or fail them: a false rejection here is a judge
bug. Each file names its problem in its header (a built-in, or a fixture under tests/); the GEMM
candidates sum in different orders (tiles, split-K, tl.sum, pairwise trees, Kahan), and the
llm_* files carry the boilerplate models write around a kernel (unused imports, the reference
Model repeated, get_inputs, a markdown answer, the KernelBench-v3 class name)."""
import re
from pathlib import Path

import pytest

from conftest import CORPUS, problem_for, read_expectation
from megakernel_gym.curriculum import builtin_names, get_problem
from megakernel_gym.rewards import Candidate

HONEST = sorted([*(CORPUS / "honest").glob("*.py"), *(CORPUS / "honest").glob("*.md")])


@pytest.mark.parametrize("path", HONEST, ids=[p.name for p in HONEST])
def test_honest(cpu_judge, path: Path):
    exp = read_expectation(path)
    assert exp["status"] == "correct", f"{path.name}: the honest corpus holds correct candidates only"
    res = cpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert res.status == "correct", f"{path.name} on {exp['problem']}: {res.status}: {res.reason}"
    assert not res.flags, f"{path.name}: flags on an honest kernel: {res.flags}"
    assert len(res.seeds) == 6 and all(s["ok"] for s in res.seeds), res.seeds


def _level(problem: str) -> int:
    if problem.endswith(".py"):
        from megakernel_gym.rewards import Problem
        return int(Problem.from_file(Path(__file__).parent / problem).meta["LEVEL"])
    return int(get_problem(problem).meta["LEVEL"])


def test_honest_corpus_coverage():
    assert len(HONEST) >= 24, f"only {len(HONEST)} honest candidates"
    headers = {p.name: read_expectation(p) for p in HONEST}
    for name, exp in headers.items():
        assert exp["problem"] in builtin_names() or exp["problem"].endswith(".py"), (name, exp["problem"])
        # the line after `# problem:` says what the candidate exercises
        lines = exp["source"].splitlines()
        assert lines[2].startswith("# ") and len(lines[2]) > 20, f"{name}: no description line"
    levels = {_level(e["problem"]) for e in headers.values()}
    assert {1, 2, 3} <= levels, levels
    gemm_fixtures = [n for n, e in headers.items() if e["problem"].startswith("fixtures/honest/")]
    assert len(gemm_fixtures) >= 6, gemm_fixtures
    boilerplate = [n for n in headers if n.startswith("llm_")]
    assert len(boilerplate) >= 6, boilerplate
    assert any(n.endswith(".md") for n in boilerplate)
    assert any(not re.search(r"^class ModelNew\b", headers[n]["source"], re.M) for n in boilerplate)
