"""Red-team corpus: tests/adversarial/ holds one exploit per file, each with the verdict a correct judge
MUST give; tests/adversarial/honest/ holds the honest twins of the rules those exploits meet (each must
stay `correct`).

Header lines of a corpus file:
  # expect: STATUS [DETAIL|DETAIL...] [or STATUS [DETAIL...]]   what the cpu backend must say. DETAIL is a
            flag rule for `rejected` (any one of them in res.flags), the category for any other status.
  # expect-gpu: ...        the same for the gpu backend (tests marked gpu; skipped without CUDA)
  # expect-gpu-bare: ...   the gpu backend with the Python layers off (static_checks=False, python_guard=False,
                           as tests/test_gpu_accounting.py judges): what the GPU accounting must hold alone
  # gpu-only: WHY          the cheat never runs on the cpu backend, so `correct` there is right
  # timeout: S             a hang: judged by a judge with a short timeout (5 s here; S is the most it may take)
  # check: judge_memory    judged by test_print_flood_judge_memory, not by the verdict alone
  # problem: NAME          a built-in problem
  # family: ...            what the file belongs to (issue 38's family number first)
  # honest: honest/X.py    the honest twin of the rule that must refuse this file
  # hole: WHAT             today's judge gets it wrong: the test is xfail(strict=True), so CI stays green
                           while the hole is open and turns red the day it is closed (then drop the line)
  # hole-gpu: WHAT         the same for the gpu backend's test (hole-gpu-bare: for the bare gpu judge's)
and one comment line saying what the file does.
"""
import re
import tracemalloc
from pathlib import Path

import pytest

from conftest import problem_for
from megakernel_gym.rewards import Candidate

HERE = Path(__file__).parent / "adversarial"
EXPLOITS = sorted(HERE.glob("*.py"))
HONEST = sorted((HERE / "honest").glob("*.py"))


def header(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"# ([a-z-]+): (.*)$", line)
        if not m:
            break
        out.setdefault(m.group(1), m.group(2).strip())
    return out


def verdict_ok(res, expect: str) -> bool:
    """Whether an EvalResult is one of the verdicts `expect` allows."""
    for alt in expect.split(" or "):
        parts = alt.split()
        if not parts or res.status != parts[0]:
            continue
        if len(parts) == 1:
            return True
        allowed = set(parts[1].split("|"))
        if parts[0] == "rejected" and allowed & {f.rule for f in res.flags}:
            return True
        if parts[0] != "rejected" and res.category in allowed:
            return True
    return False


def _params(paths, key_filter, hole_key="hole"):
    out = []
    for p in paths:
        h = header(p)
        if not key_filter(h):
            continue
        marks = [pytest.mark.xfail(strict=True, reason=f"hole: {h[hole_key]}")] if h.get(hole_key) else []
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


def _judge(store_path, timeout_s, **kw):
    from megakernel_gym.rewards import Judge
    return Judge(backend="cpu", store=store_path, timeout_s=timeout_s, use_cache=False, **kw)


@pytest.fixture(scope="module")
def judge(store_path):
    # tests/conftest.py's cpu_judge, but its candidate worker is not replaced after each refused candidate
    # (recycle="never"): a replacement costs 4-5 s of torch's import on two cores, and most of this corpus is
    # refused. Each candidate still gets a module of its own and a reset guard; a hang still replaces it.
    j = _judge(store_path, 120, recycle="never")
    yield j
    j.close()


@pytest.fixture(scope="module")
def short_judge(store_path):
    j = _judge(store_path, 5)
    yield j
    j.close()


def _evaluate(judge, path: Path):
    h = header(path)
    res = judge.evaluate(problem_for({"problem": h["problem"]}), Candidate(path.read_text(), str(path)))
    return h, res


def _why(res) -> str:
    return f"{res.status} {res.category} {[f.rule for f in res.flags]}: {(res.reason or '')[:300]}"


@pytest.mark.parametrize("path", _params(EXPLOITS, lambda h: "timeout" not in h and "check" not in h))
def test_exploit(judge, path: Path):
    h, res = _evaluate(judge, path)
    assert verdict_ok(res, h["expect"]), f"expected {h['expect']}, got {_why(res)}"
    if "gpu-only" not in h:
        assert not res.correct


@pytest.mark.parametrize("path", _params(EXPLOITS, lambda h: "timeout" in h))
def test_exploit_hangs(short_judge, path: Path):
    h, res = _evaluate(short_judge, path)
    assert verdict_ok(res, h["expect"]), f"expected {h['expect']}, got {_why(res)}"
    assert not res.correct


@pytest.mark.parametrize("path", _params(HONEST, lambda h: True))
def test_honest_twin(judge, path: Path):
    h, res = _evaluate(judge, path)
    assert h["expect"] == "correct"
    assert res.status == "correct", _why(res)


def test_every_exploit_has_its_header():
    for p in EXPLOITS:
        h = header(p)
        assert {"expect", "problem", "family"} <= set(h), p.name
        assert h["problem"] != "", p.name
        if "honest" in h:
            assert (HERE / h["honest"]).is_file(), (p.name, h["honest"])
    assert len(EXPLOITS) >= 40


def _print_flood_params():
    return _params([p for p in EXPLOITS if header(p).get("check") == "judge_memory"], lambda h: True)


@pytest.mark.parametrize("path", _print_flood_params())
def test_print_flood_judge_memory(judge, path: Path):
    """A candidate's prints must not grow the judge's own process: what the judge reads of a worker's
    log is bounded, whatever the candidate wrote."""
    judge.warm()
    tracemalloc.start()
    try:
        h, res = _evaluate(judge, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert verdict_ok(res, h["expect"]), _why(res)
    assert peak < 64 << 20, f"the judge process allocated {peak >> 20} MiB while the candidate printed"


# ---- the gpu backend: the families whose cheat only the gpu backend's timing would see

@pytest.fixture(scope="module")
def gpu_judge(store_path):
    from megakernel_gym.rewards import Judge
    j = Judge(backend="gpu", store=store_path, timeout_s=120, use_cache=False)
    yield j
    j.close()


@pytest.mark.gpu
@pytest.mark.parametrize("path", _params(EXPLOITS, lambda h: "expect-gpu" in h, hole_key="hole-gpu"))
def test_exploit_gpu(gpu_judge, path: Path):
    h, res = _evaluate(gpu_judge, path)
    assert verdict_ok(res, h["expect-gpu"]), f"expected {h['expect-gpu']}, got {_why(res)}"
    assert not res.correct


@pytest.mark.gpu
@pytest.mark.parametrize("path", _params(HONEST, lambda h: True))
def test_honest_twin_gpu(gpu_judge, path: Path):
    """Each honest twin is honest on a GPU too: the cpu backend refuses what a GPU compile refuses (Triton's front
    end on each launched kernel), so a twin only the interpreter took would be a rule fitted to the interpreter."""
    h, res = _evaluate(gpu_judge, path)
    assert res.status == "correct", _why(res)


@pytest.fixture(scope="module")
def bare_gpu_judge(store_path):
    from megakernel_gym.rewards import Judge
    j = Judge(backend="gpu", store=store_path, timeout_s=120, use_cache=False, static_checks=False,
              python_guard=False)
    yield j
    j.close()


@pytest.mark.gpu
@pytest.mark.parametrize("path", _params(EXPLOITS, lambda h: "expect-gpu-bare" in h, hole_key="hole-gpu-bare"))
def test_exploit_gpu_accounting_alone(bare_gpu_judge, path: Path):
    h, res = _evaluate(bare_gpu_judge, path)
    assert verdict_ok(res, h["expect-gpu-bare"]), f"expected {h['expect-gpu-bare']}, got {_why(res)}"
    assert not res.correct
