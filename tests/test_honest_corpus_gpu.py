"""The honest GPU corpus (tests/corpus/honest_gpu): CUDA C candidates written the way models write
them -- KernelBench `load_inline` answers (some as Markdown answers, some naming the class `Model`)
and the project's NVRTC loader `load_cuda` -- across levels 1-3.

On a GPU every one must be judged `correct` on all six seeds. On the cpu backend none can run: the
judge must still take each as honest code (no anti-cheat flag, no compile error) and end in
runtime_error / no_gpu, saying that running it needs a GPU.

Each file starts with `# expect: correct`, `# problem: NAME`, `# format: load_inline|load_cuda` and
one comment line saying what it exercises.
"""
import os
import re
from pathlib import Path

import pytest

from conftest import CORPUS, problem_for, read_expectation
from megakernel_gym.rewards import Candidate, Judge

HONEST_GPU = sorted([*(CORPUS / "honest_gpu").glob("*.py"), *(CORPUS / "honest_gpu").glob("*.md")])
IDS = [p.name for p in HONEST_GPU]


def _format(path: Path) -> str | None:
    m = re.search(r"^# format: (\w+)", path.read_text(), re.M)
    return m.group(1) if m else None


def _level(problem: str) -> int | None:
    m = re.search(r"(?:^|/)level(\d+)/", problem)
    if m:
        return int(m.group(1))
    from megakernel_gym.curriculum import get_problem
    return get_problem(problem).level


@pytest.fixture(scope="session")
def honest_gpu_judge(tmp_path_factory):
    # load_inline builds two translation units with the host compiler and nvcc (tens of seconds,
    # the multi-kernel level-3 answers over a minute), inside the candidate's time limit
    # MKGYM_GPU_TEST_STORE: a store to share with bench/judge_kb_format.py (the problems' baselines are timed once)
    store = os.environ.get("MKGYM_GPU_TEST_STORE") or tmp_path_factory.mktemp("honest_gpu") / "results.sqlite"
    j = Judge(backend="gpu", store=store, use_cache=False,
              timeout_s=300)
    yield j
    j.close()


@pytest.mark.gpu
@pytest.mark.parametrize("path", HONEST_GPU, ids=IDS)
def test_honest_candidate_is_correct_on_gpu(honest_gpu_judge, path: Path):
    exp = read_expectation(path)
    assert exp["status"] == "correct"
    res = honest_gpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert res.status == "correct", (f"{path.name}: {res.status} ({res.category}): {res.reason}\n"
                                     f"{res.compile_log or ''}\n{res.log_tail or ''}")
    assert len(res.seeds) == 6 and all(s["ok"] for s in res.seeds), res.seeds


@pytest.mark.parametrize("path", HONEST_GPU, ids=IDS)
def test_honest_candidate_needs_a_gpu_on_cpu(cpu_judge, path: Path):
    exp = read_expectation(path)
    res = cpu_judge.evaluate(problem_for(exp), Candidate(exp["source"], str(path)))
    assert (res.status, res.category) == ("runtime_error", "no_gpu"), (
        f"{path.name}: {res.status} ({res.category}): {res.reason}\n{res.compile_log or ''}")
    assert not res.flags, res.flags
    assert "gpu" in res.reason.lower(), res.reason
    assert not res.correct


def test_honest_gpu_corpus_covers_formats_and_levels():
    assert len(HONEST_GPU) >= 22, [p.name for p in HONEST_GPU]
    formats = {p.name: _format(p) for p in HONEST_GPU}
    assert set(formats.values()) <= {"load_inline", "load_cuda"}, formats
    assert sum(f == "load_inline" for f in formats.values()) >= 16, formats
    assert sum(f == "load_cuda" for f in formats.values()) >= 6, formats
    levels = set()
    for p in HONEST_GPU:
        lines = p.read_text().splitlines()
        assert lines[0] == "# expect: correct", p.name
        assert lines[1].startswith("# problem: ") and lines[2].startswith("# format: "), p.name
        assert lines[3].startswith("# ") and len(lines[3]) > 20, f"{p.name}: line 4 says what it exercises"
        exp = read_expectation(p)
        problem_for(exp)  # the problem exists
        levels.add(_level(exp["problem"]))
    assert {1, 2, 3} <= levels, levels
