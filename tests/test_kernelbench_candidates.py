"""The team's honest answers to KernelBench problems (bench/kernelbench_candidates/, judged at real sizes
on a GPU by bench/kernelbench_suite.py, issue 41): each names its problem, its kind and the smaller sizes
it is checked at on the cpu backend; all pass the judge's static checks, and each is judged here with
the problem file unchanged but for a CPU_SIZES line: the Triton answers correct (but three slow ones),
the CUDA ones compiled by NVRTC (running them needs a GPU). A rule that refused one of them would be
refusing an honest kernel."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from megakernel_gym.curriculum.suite import kernelbench_dir
from megakernel_gym.rewards import Candidate, Problem, anticheat

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "bench" / "kernelbench_candidates").glob("*.py"))
# judged on the cpu backend in CI: all but the level-1 GEMMs, whose 128x128 tiles take the Triton
# interpreter minutes on 2 cores (their IEEE-fp32 tiles are the level-2 answers' too, judged here)
SLOW = ("level1_1_Square_matrix_multiplication_triton.py", "level1_2_Standard_matrix_multiplication_triton.py",
        "level1_9_Tall_skinny_matrix_multiplication_triton.py")
JUDGED = [p.name for p in FILES if p.name not in SLOW]
# problems the judge does not serve (filters.trivial_answer): level2/9's ReLU(1.5 (x W + b - 2)) is zeros on its
# plain seed at KernelBench's sizes and at these (a kernel that tells the plain draw apart would write zeros there
# and be scored correct); its answer is honest, and gets not_run / unservable, as every candidate of the problem does
TRIVIAL = {"level2_9_Matmul_Subtract_Multiply_ReLU_triton.py": "a kernel that writes zeros"}


def header(path: Path) -> dict:
    text = path.read_text()
    out = {}
    for key in ("problem", "kind", "cpu_sizes"):
        m = re.search(rf"^# {key}: (.+)$", text, re.M)
        assert m, f"{path.name}: no '# {key}:' line"
        out[key] = m.group(1).strip()
    out["cpu_sizes"] = ast.literal_eval(out["cpu_sizes"])
    return out


def test_there_are_enough_answers_across_the_three_levels():
    levels = {header(p)["problem"].split("/")[0] for p in FILES}
    assert len(FILES) >= 30 and levels == {"level1", "level2", "level3"}
    assert {header(p)["kind"] for p in FILES} == {"triton", "cuda"}


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_answer_names_a_real_problem_and_passes_the_static_checks(path):
    h = header(path)
    problem = kernelbench_dir() / h["problem"]
    assert problem.is_file(), h["problem"]
    source = problem.read_text()
    for name in h["cpu_sizes"]:       # the sizes replace the problem's own module globals
        assert re.search(rf"^{name}\s*=", source, re.M), f"{path.name}: {name} is not a global of {h['problem']}"
    assert anticheat.candidate_class(path.read_text()) == "ModelNew"
    assert anticheat.check_candidate(path.read_text()) == []


def _scaled(path: Path, tmp_path: Path) -> Problem:
    h = header(path)
    src = (kernelbench_dir() / h["problem"]).read_text()
    copy = tmp_path / Path(h["problem"]).name
    copy.write_text(src + f"\n\nCPU_SIZES = {h['cpu_sizes']!r}\n")
    return Problem.from_file(copy)


@pytest.mark.parametrize("name", JUDGED)
def test_each_answer_is_judged_correct_on_the_cpu_backend_at_its_cpu_sizes(cpu_judge, tmp_path, name):
    path = ROOT / "bench" / "kernelbench_candidates" / name
    if name in TRIVIAL:
        from megakernel_gym.rewards import ProblemUnservable
        with pytest.raises(ProblemUnservable, match=TRIVIAL[name]):
            cpu_judge.evaluate(_scaled(path, tmp_path), Candidate(path.read_text(), name))
        return
    res = cpu_judge.evaluate(_scaled(path, tmp_path), Candidate(path.read_text(), name))
    if header(path)["kind"] == "cuda":      # compiled by NVRTC here; running it needs the gpu backend
        assert (res.status, res.category) == ("runtime_error", "no_gpu"), res.reason
    else:
        assert res.status == "correct", res.reason
