"""A problem's footprint (issue 41, item 2): its inputs', parameters' and outputs' bytes at its sizes,
found on the meta device without allocating them (reference_role.footprint), and the cpu backend's answer to a
problem too large for the host: a clear error that names the bytes and the fix, before anything is
allocated, and a judge that goes on judging."""
from __future__ import annotations

import types

import pytest
import torch

from conftest import HERE
from megakernel_gym.rewards import Candidate, Problem, ProblemError, ProblemUnservable
from megakernel_gym.rewards.reference_role import footprint, host_need

SMALL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.register_buffer("shift", torch.zeros(n, dtype=torch.float16))

    def forward(self, x):
        return self.fc(x), x.sum(dim=1)

def get_inputs():
    return [torch.randn(8, 64)]

def get_init_inputs():
    return [64, 32]
'''


# an honest answer to level1/4 (one program per row of A): it passes the static checks, so the judge
# gets as far as the problem's reference
MATVEC = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matvec(a, b, c, K, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        ks = k0 + tl.arange(0, BLOCK)
        m = ks < K
        acc += tl.load(a + row * K + ks, mask=m, other=0.0) * tl.load(b + ks, mask=m, other=0.0)
    tl.store(c + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        C = torch.empty((M, 1), device=A.device, dtype=A.dtype)
        _matvec[(M,)](A, B, C, K, BLOCK=1024)
        return C
'''


def _module(src: str) -> types.ModuleType:
    mod = types.ModuleType("p")
    exec(compile(src, "p.py", "exec"), mod.__dict__)
    return mod


def test_footprint_counts_inputs_parameters_buffers_and_outputs_exactly():
    fp = footprint(torch, _module(SMALL))
    assert fp == {"inputs": 8 * 64 * 4, "params": (64 * 32 + 32) * 4 + 32 * 2, "outputs": (8 * 32 + 8) * 4}
    assert host_need(fp) == 2 * fp["inputs"] + fp["params"] + 2 * fp["outputs"]


def test_a_problem_that_cannot_run_on_meta_has_no_footprint():
    # data-dependent code (.item(), a shape from values) cannot be sized without the data: unknown, not 0
    data = SMALL.replace("return self.fc(x), x.sum(dim=1)", "return self.fc(x) * float(x.abs().max().item())")
    assert footprint(torch, _module(data)) is None
    assert footprint(torch, _module(SMALL.replace("def get_inputs", "def no_inputs"))) is None


def test_kernelbench_at_real_sizes_is_sized_without_allocating():
    from megakernel_gym.curriculum.suite import kernelbench_dir
    root = kernelbench_dir()
    mv = footprint(torch, _module((root / "level1" / "4_Matrix_vector_multiplication_.py").read_text()))
    assert mv == {"inputs": (2048 * 1048576 + 1048576) * 4, "params": 0, "outputs": 2048 * 4}   # 8 GiB of A
    mlp = footprint(torch, _module((root / "level3" / "1_MLP.py").read_text()))
    assert mlp["params"] > 2 << 30 and mlp["inputs"] < 16 << 20


def test_the_cpu_backend_refuses_a_problem_too_large_for_its_workers_and_judges_on(cpu_judge):
    """KernelBench's level1/4 needs 16 GiB at its sizes (its 8 GiB input and the scaled copy): more than a
    cpu worker's address space may hold (half the host's memory, at most 16 GiB). The judge says so at
    once, and judges the next problem as before."""
    from megakernel_gym.curriculum.suite import kernelbench_dir
    path = kernelbench_dir() / "level1" / "4_Matrix_vector_multiplication_.py"
    big = Problem.from_file(path)
    answer = MATVEC
    with pytest.raises(ProblemUnservable, match=r"(?s)needs about 16\.0 GiB on the host.*backend='gpu'.*CPU_SIZES"):
        cpu_judge.evaluate(big, Candidate(answer, "mv.py"))
    assert issubclass(ProblemUnservable, ProblemError)
    from test_candidate_formats import MODELNEW_CODE   # an honest Triton ReLU
    relu = Problem.from_file(HERE / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py")
    res = cpu_judge.evaluate(relu, Candidate(MODELNEW_CODE, "relu.py"))
    assert res.status == "correct", res.reason


def test_the_env_ends_an_episode_the_judge_cannot_serve_with_no_reward_and_draws_it_no_more(tmp_path):
    """A suite's problem too large for the cpu backend: the step that submits a kernel ends the episode
    (truncated, reward 0: not the kernel's doing), says why, and the env does not draw it again. A pool
    reports it the same way (judge.judge_one: status not_run, category unservable)."""
    from megakernel_gym.curriculum.suite import kernelbench_dir
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.rewards.pool import judge_one
    src = kernelbench_dir() / "level1"
    (tmp_path / "level1").mkdir()
    for name in ("4_Matrix_vector_multiplication_.py", "19_ReLU.py"):
        (tmp_path / "level1" / name).write_text((src / name).read_text())
    env = MegaKernelEnv(backend="cpu")
    try:
        obs, info = env.reset(seed=0, options={"suite": str(tmp_path), "problem": "level1/4_Matrix_vector_multiplication_"})
        obs, reward, terminated, truncated, info = env.step(MATVEC)
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert "needs about 16.0 GiB" in info["problem_error"] and "no reward" in obs["feedback"]
        assert info["eval"]["status"] == "not_run" and info["eval"]["category"] == "unservable"
        for k in range(12):   # the folder's other level-1 problem, every time
            obs, info = env.reset(seed=k, options={"suite": str(tmp_path), "level": 1})
            assert info["problem"] == "level1/19_ReLU", k
        res, stored = judge_one(env._get_judge(), env._other_suites[str(tmp_path)].get(
            "level1/4_Matrix_vector_multiplication_"), Candidate(MATVEC), "cpu")
        assert (res.status, res.category, stored) == ("not_run", "unservable", False)
        from megakernel_gym.rewards.reward_fns import gated_log_speedup
        assert gated_log_speedup(res) == 0.0   # the TRL reward's too: no candidate's doing
    finally:
        env.close()


def test_a_candidates_worker_cannot_claim_the_judges_categories(cpu_judge, monkeypatch):
    """The candidate owns its worker, so its header is the candidate's word: a failure it reports as
    `unservable` (which the env and the reward score 0) or `problem` comes back as `forged`, a failure."""
    from test_candidate_formats import MODELNEW_CODE

    from megakernel_gym.rewards.judge import candidate_category
    from megakernel_gym.rewards.reward_fns import gated_log_speedup
    assert [candidate_category({"category": c}) for c in ("unservable", "problem", "oom", 7, "x" * 65)] == \
        ["forged", "forged", "oom", "forged", "forged"]
    assert candidate_category({}) is None
    relu = Problem.from_file(HERE / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py")
    forged = {"ok": True, "status": "runtime_error", "category": "unservable", "reason": "not my doing"}
    monkeypatch.setattr(cpu_judge.cand, "call", lambda msg, timeout=None: dict(forged))
    res = cpu_judge.evaluate(relu, Candidate(MODELNEW_CODE + "\n# forged\n", "forged.py"))
    assert (res.status, res.category) == ("runtime_error", "forged") and gated_log_speedup(res) < 0


def test_the_env_scores_any_other_problem_error_as_a_failure_and_goes_on():
    """A ProblemError other than ProblemUnservable (a candidate can reach those: a forged header, a GPU it
    fills) is a failure of the step, as a pool reports it, not an exception out of env.step."""
    from megakernel_gym.env.megakernel import MegaKernelEnv

    class Broken:
        def evaluate(self, problem, candidate):
            raise ProblemError("problem 'p' failed in the candidate's worker")

        def close(self):
            pass

    env = MegaKernelEnv(backend="cpu")
    try:
        env.reset(seed=0, options={"level": 1})
        env._judge = Broken()
        obs, reward, terminated, truncated, info = env.step(MATVEC)
        # scored as any runtime error is (the improvement reward: -0.8 over the episode's start)
        assert info["eval"]["status"] == "runtime_error" and info["eval"]["category"] == "problem"
        assert not terminated and not truncated and reward == pytest.approx(0.2)
        assert "problem_error" not in info and env.problem.sha256 not in env._refused
    finally:
        env.close()


def test_prepare_sizes_a_problem_and_runs_its_reference_with_no_candidate(cpu_judge):
    """Judge.prepare does what a problem's first evaluation would do before any candidate (its footprint,
    its reference run once), so that a suite can be made ready up front (bench/kernelbench_suite.py); a
    problem whose reference cannot run is a ProblemError there, as in evaluate, and one too large for the
    backend is ProblemUnservable."""
    from megakernel_gym.curriculum.suite import kernelbench_dir
    from megakernel_gym.rewards.admission import gpu_need
    small = Problem("small", SMALL)
    out = cpu_judge.prepare(small)
    assert out["footprint"] == footprint(torch, _module(SMALL)) and out["gpu_need"] == gpu_need(out["footprint"])
    assert "baselines" not in out and out["seconds"] > 0     # cpu: no timing, so no baselines
    assert small.sha256 in cpu_judge._reference_ran
    broken = Problem("broken", SMALL.replace("return self.fc(x), x.sum(dim=1)", "raise ValueError('no reference')"))
    with pytest.raises(ProblemError, match="no reference"):
        cpu_judge.prepare(broken)
    with pytest.raises(ProblemUnservable):
        cpu_judge.prepare(Problem.from_file(kernelbench_dir() / "level1" / "4_Matrix_vector_multiplication_.py"))


def test_a_pools_prepare_many_answers_every_problem_in_order():
    """One result per problem, in order, whichever slot took it: a broken one is an error in its place
    (unservable where the backend cannot run it at all), and the others are prepared."""
    from megakernel_gym.curriculum.suite import kernelbench_dir
    from megakernel_gym.rewards import LocalPool
    problems = [Problem("small", SMALL),
                Problem("broken", SMALL.replace("return self.fc(x), x.sum(dim=1)", "raise ValueError('no reference')")),
                Problem.from_file(kernelbench_dir() / "level1" / "4_Matrix_vector_multiplication_.py"),
                Problem("small3", SMALL.replace("get_inputs():\n    return [torch.randn(8, 64)]",
                                                "get_inputs():\n    return [torch.randn(3, 64)]"))]
    seen = []
    with LocalPool("cpu", num_workers=2, store=False) as pool:
        out = pool.prepare_many(problems, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1, 2, 3] and [r["problem"] for r in out] == [p.name for p in problems]
    assert out[0]["footprint"]["inputs"] == 8 * 64 * 4 and out[3]["footprint"]["inputs"] == 3 * 64 * 4
    assert "no reference" in out[1]["error"] and out[1]["unservable"] is False
    assert "16.0 GiB" in out[2]["error"] and out[2]["unservable"] is True
