"""The adversarial corpus must all be rejected or failed with the right category; the legit
corpus (every shipped reference candidate, plus tests/corpus/legit) must all be correct."""
from pathlib import Path

import pytest

from conftest import CORPUS, problem_for, read_expectation
from megakernel_gym.curriculum import builtin_names, get_problem, reference_candidates
from megakernel_gym.rewards import Candidate

ADVERSARIAL = sorted((CORPUS / "adversarial").glob("*.py"))
LEGIT = sorted((CORPUS / "legit").glob("*.py"))


@pytest.mark.parametrize("path", ADVERSARIAL, ids=[p.stem for p in ADVERSARIAL])
def test_adversarial(cpu_judge, path: Path):
    exp = read_expectation(path)
    res = cpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert res.status == exp["status"], (res.status, res.reason)
    if exp["status"] == "rejected":
        rules = {f.rule for f in res.flags}
        assert exp["detail"] in rules, (rules, res.reason)
    elif exp["detail"]:
        assert res.category == exp["detail"], (res.category, res.reason)
    assert not res.correct


@pytest.mark.parametrize("name", [n for n in builtin_names() if "triton" in reference_candidates(n)])
def test_reference_triton_candidates_correct(cpu_judge, name):
    ref = reference_candidates(name)["triton"]
    res = cpu_judge.evaluate(get_problem(name), ref)
    assert res.status == "correct", res.reason
    assert len(res.seeds) == 6 and all(s["ok"] for s in res.seeds)
    assert any(s["seed"] == "secret" for s in res.seeds)


@pytest.mark.parametrize("path", LEGIT, ids=[p.stem for p in LEGIT])
def test_legit(cpu_judge, path: Path):
    exp = read_expectation(path)
    res = cpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert res.status == exp["status"] == "correct", res.reason


def test_cuda_reference_compiles_on_cpu(cpu_judge):
    """On the cpu backend a CUDA C candidate is compiled by NVRTC (errors would surface) but cannot run."""
    for name in builtin_names():
        refs = reference_candidates(name)
        if "cuda" not in refs:
            continue
        res = cpu_judge.evaluate(get_problem(name), refs["cuda"])
        assert res.status == "runtime_error" and res.category == "no_gpu", res.reason


def test_cuda_compile_error_has_line_numbers(cpu_judge):
    exp = read_expectation(CORPUS / "adversarial" / "cuda_compile_error.py")
    res = cpu_judge.evaluate(get_problem("softmax"), Candidate(exp["source"]))
    assert res.status == "compile_error"
    assert "undefined_variable" in res.compile_log and "(3): error" in res.compile_log
