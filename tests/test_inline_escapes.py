"""Host-code escapes through load_inline (issue 38, item 2: host C++ never runs natively).

tests/corpus/adversarial/inline_*.py with a `# refused:` line are candidates whose host C++ reached
what the interpreter must never run: ATen compute found by argument-dependent lookup (family 5), a
namespace-scope const written to keep state across calls (family 8), threads, static locals, global
counters, function pointers, names assembled by #define, constructor attributes, inline assembly,
extern "C" libc declarations, cuBLAS, compute tensor methods, namespace aliases, code in
PYBIND11_MODULE. test_corpus.py judges each (on the cpu backend: a compile_error naming the
construct, before any no-GPU error); here the interpreter refuses each by itself, whatever the static
rules would have said. Each has an honest twin in tests/corpus/inline_twins/ that uses the nearby
construct the interpreter does take, and must keep translating: a dry run on the CPU allocates the
reference's outputs and launches its kernel, and the cpu judge ends it in runtime_error / no_gpu.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conftest import CORPUS, problem_for, read_expectation
from megakernel_gym.rewards import Candidate, inline

ESCAPES = sorted(p for p in (CORPUS / "adversarial").glob("inline_*.py") if "# refused:" in p.read_text())
TWINS = sorted((CORPUS / "inline_twins").glob("*.py"))


def _run_dry(path: Path, monkeypatch, launches: list):
    """The candidate's ModelNew built and called with load_inline on the CPU, launches recorded."""
    import torch.utils.cpp_extension as cpp

    def fast(*a, **kw):
        mod = inline.load_inline(*a, gpu=False, **kw)
        for f in mod._functions.values():
            f.program.launcher = lambda *x: launches.append(x)
        return mod
    monkeypatch.setattr(cpp, "load_inline", fast)
    exp = read_expectation(path)
    problem = problem_for(exp)
    p = {"__name__": "problem"}
    exec(compile(problem.source, "problem.py", "exec"), p)
    c = {"__name__": "candidate"}
    exec(compile(exp["source"], path.name, "exec"), c)
    for k, v in (p.get("CPU_SIZES") or {}).items():     # before either model is built: both at the CPU's sizes
        p[k] = v
    model = c["ModelNew"](*p["get_init_inputs"]())
    torch.manual_seed(0)
    xs = p["get_inputs"]()
    with torch.no_grad():
        return model(*xs), p["Model"](*p["get_init_inputs"]())(*xs)


def test_every_escape_has_an_honest_twin():
    assert len(ESCAPES) >= 12
    assert [p.name for p in ESCAPES] == [p.name for p in TWINS]
    for p in TWINS:
        assert re.search(rf"^# twin: adversarial/{p.name}$", p.read_text(), re.M), p.name
    families = " ".join(p.read_text().split("import torch")[0] for p in ESCAPES)
    assert "family 5" in families and "family 8" in families


@pytest.mark.parametrize("path", ESCAPES, ids=[p.stem for p in ESCAPES])
def test_the_interpreter_refuses_each_escape_by_itself(path: Path, monkeypatch):
    """Without the judge's static rules: building the candidate's extension is refused at load, naming the
    construct (or, for what nvcc refuses too, in nvcc's words), so nothing of its host code runs."""
    want = re.search(r"^# refused: (.+)$", path.read_text(), re.M).group(1)
    with pytest.raises(inline.nvrtc.CudaCompileError) as e:
        _run_dry(path, monkeypatch, [])
    assert isinstance(e.value, (inline.Unsupported, inline.BuildError)), e.value
    assert want in str(e.value), str(e.value)[:600]
    if isinstance(e.value, inline.Unsupported):
        assert inline.SUPPORTED_HOST_SUBSET in str(e.value)


@pytest.mark.parametrize("path", TWINS, ids=[p.stem for p in TWINS])
def test_each_honest_twin_runs_in_the_interpreter(path: Path, monkeypatch):
    launches: list = []
    out, want = _run_dry(path, monkeypatch, launches)
    assert launches, "no kernel launched"
    assert (tuple(out.shape), out.dtype) == (tuple(want.shape), want.dtype)


@pytest.mark.parametrize("path", TWINS, ids=[p.stem for p in TWINS])
def test_each_honest_twin_needs_a_gpu_on_the_cpu_judge(cpu_judge, path: Path):
    exp = read_expectation(path)
    assert (exp["status"], exp["detail"]) == ("runtime_error", "no_gpu")
    res = cpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert (res.status, res.category) == ("runtime_error", "no_gpu"), (res.status, res.category, res.reason)
    assert not res.flags, res.flags


def test_a_refusal_comes_before_the_no_gpu_error():
    """On a machine without a GPU the host code is still read, so an escape is a compile_error there too."""
    src = read_expectation(CORPUS / "adversarial" / "inline_adl_only.py")["source"]
    cuda = re.search(r'CUDA = r"""(.*?)"""', src, re.S).group(1)
    with pytest.raises(inline.Unsupported, match="argument-dependent lookup"):
        inline.load_inline("adl", "", cuda, functions=["softmax_forward"], gpu=False)


@pytest.fixture(scope="module")
def gpu_judge(tmp_path_factory):
    import os
    from megakernel_gym.rewards import Judge
    store = os.environ.get("MKGYM_GPU_TEST_STORE") or tmp_path_factory.mktemp("escapes") / "results.sqlite"
    j = Judge(backend="gpu", store=store, use_cache=False, timeout_s=300)
    yield j
    j.close()


@pytest.mark.gpu
@pytest.mark.parametrize("path", TWINS, ids=[p.stem for p in TWINS])
def test_each_honest_twin_is_correct_on_gpu(gpu_judge, path: Path):
    exp = read_expectation(path)
    res = gpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert res.status == "correct", (res.status, res.category, res.reason)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ESCAPES, ids=[p.stem for p in ESCAPES])
def test_each_escape_is_refused_on_gpu(gpu_judge, path: Path):
    """With a GPU there is still no native build: the verdict is the cpu backend's, except where the host code
    is refused only when a call reaches it (`# expect-gpu:`; no call runs host code on the cpu backend)."""
    exp = read_expectation(path)
    res = gpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    exp = {**exp, **(exp["gpu"] or {})}
    if exp["status"] == "rejected":
        assert exp["detail"] in {f.rule for f in res.flags}, (res.status, res.reason)
    else:
        assert (res.status, res.category) == (exp["status"], exp["detail"]), (res.status, res.category, res.reason)
