"""Which problems' code a judge trusts in the workers it keeps (rewards/trusted.py): the built-ins and KernelBench's
own files by their text's SHA-256; a user's file, or KernelBench's changed by one byte, gets fresh workers."""
import ast

import pytest

from megakernel_gym.curriculum import get_problem
from megakernel_gym.curriculum.suite import SuiteError, kernelbench_dir
from megakernel_gym.rewards import Judge, Problem
from megakernel_gym.rewards.trusted import LEVELS, is_builtin, is_trusted, kernelbench_list, trusted_sha256s

try:
    KB = kernelbench_dir()
except SuiteError:
    KB = None
needs_kb = pytest.mark.skipif(KB is None, reason="KernelBench's problem files are not beside the checkout")
SAFE_IMPORTS = {"torch", "torch.nn", "torch.nn.functional", "math", "itertools", "einops", "numpy", "collections",
                "collections.abc"}
# what would change the process a trusted problem's code runs in (the read trusted.py's docstring reports)
PROCESS_NAMES = {"manual_seed", "set_default_dtype", "set_default_device", "set_default_tensor_type", "backends",
                 "setattr", "delattr", "globals", "__import__", "exec", "eval", "compile", "open", "sys", "os",
                 "set_grad_enabled", "use_deterministic_algorithms", "set_flush_denormal", "set_num_threads"}


@needs_kb
def test_the_list_is_kernelbench_exactly():
    """Nothing but KernelBench's level 1-3 files is trusted by hash, and every one of them is."""
    assert trusted_sha256s() == {ln.split()[0] for ln in kernelbench_list(KB).splitlines()
                                 if ln.strip() and not ln.startswith("#")}
    assert len(trusted_sha256s()) == 250


@needs_kb
def test_what_kernelbench_runs_touches_nothing_of_the_process():
    """The read behind the trust, kept true: imports of torch and a few libraries, and no name that sets a seed, a
    default, a backend flag, an attribute by name, or runs code from text."""
    for lvl in LEVELS:
        for f in sorted((KB / lvl).glob("*.py")):
            tree = ast.parse(f.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    assert {a.name for a in node.names} <= SAFE_IMPORTS, (f, ast.unparse(node))
                elif isinstance(node, ast.ImportFrom):
                    assert node.module in SAFE_IMPORTS, (f, ast.unparse(node))
                elif isinstance(node, ast.Name):
                    assert node.id not in PROCESS_NAMES, (f, node.id, node.lineno)
                elif isinstance(node, ast.Attribute):
                    assert node.attr not in PROCESS_NAMES, (f, node.attr, node.lineno)


@needs_kb
def test_kernelbench_is_trusted_and_a_changed_byte_is_not(tmp_path):
    f = KB / "level1" / "19_ReLU.py"
    kb = Problem.from_file(f)
    assert is_trusted(kb) and not is_builtin(kb)
    assert is_trusted(Problem.from_source(f.read_text(), name="renamed", path=None))   # by its text, any name
    changed = tmp_path / "19_ReLU.py"
    changed.write_text(f.read_text() + "\n")
    assert not is_trusted(Problem.from_file(changed))
    assert is_trusted(get_problem("softmax"))


@needs_kb
def test_a_judge_keeps_its_workers_between_trusted_problems_only(tmp_path):
    """KernelBench's file after a built-in keeps both workers (session 59: each change of a user's problem cost a GPU
    ~20 s of worker starts); a user's file, even KernelBench's with a byte added, gets both fresh, and so does the
    trusted problem after it."""
    user = tmp_path / "19_ReLU.py"
    user.write_text((KB / "level1" / "19_ReLU.py").read_text() + "# mine\n")
    with Judge(backend="cpu", store=tmp_path / "s.sqlite", timeout_s=120, use_cache=False) as j:
        j.warm()
        steps = [(get_problem("softmax"), True), (Problem.from_file(KB / "level1" / "19_ReLU.py"), True),
                 (Problem.from_file(user), False), (get_problem("softmax"), False), (get_problem("gelu"), True)]
        for problem, kept in steps:
            ref, cand = j.ref.proc, j.cand.proc
            j._keep_problems_apart(problem)
            j.warm()
            assert (j.ref.proc is ref and j.cand.proc is cand) == kept, problem.name


def test_a_problem_prepared_checked_or_refused_is_kept_apart_too(tmp_path):
    """Red team 21: only evaluate kept problems apart, so a user's file through check_problem (or prepare, or
    refusal) left its module-level code in the kept reference worker: here it replaces the judge's comparison
    with one that always passes, and a zeros kernel on the built-in softmax after it scored correct."""
    from pathlib import Path

    from megakernel_gym.curriculum import reference_candidates
    zeros = (Path(__file__).parent / "data" / "zeros_softmax_kernel.py").read_text()     # a Triton kernel writing 0
    evil = Problem.from_file(Path(__file__).parent / "data" / "compare_patching_problem.py")
    with Judge(backend="cpu", store=False, timeout_s=120, use_cache=False) as j:
        j.check_problem(evil)
        res = j.evaluate(get_problem("softmax"), zeros)
        assert res.status != "correct", res.reason
        assert j.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"]).status == "correct"
