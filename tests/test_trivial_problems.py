"""The judge serves no problem whose answer a kernel computing nothing would match (filters.trivial_answer):
all zeros, or the same answer for any input. A red team (8) found KernelBench's level2/80_Gemm_Max_Subtract_GELU
returns exactly zeros (GELU of a max's single column minus its own mean), and a kernel writing zeros scored
correct on all six seeds; `mkgym problems check` would have refused it, but nothing ran that check on the
suites the env serves. Honest problems beside it stay served: a scalar loss, inputs that are not random,
an output that is mostly zeros."""
import textwrap

import pytest
import torch

from megakernel_gym.rewards import Candidate, Problem, ProblemUnservable
from megakernel_gym.rewards.filters import copied_input, trivial_answer

ZEROS_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, max_dim):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.max_dim = max_dim

    def forward(self, x):
        y = torch.empty((x.shape[0], 1), device=x.device, dtype=x.dtype)
        _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
'''


def test_trivial_answer_names_zeros_and_input_independent_outputs_only():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    assert "zero" in trivial_answer(torch, [torch.zeros(8, 1)], None, True, None, None)
    assert "zero" in trivial_answer(torch, [torch.full((8,), 1e-9)], None, True, None, None)   # within atol
    assert "do not depend on the inputs" in trivial_answer(torch, [torch.ones(4)], [torch.ones(4)], True, None, None)
    # honest: a varying answer; a mostly-zero one (ReLU); a scalar loss; the same answer for inputs that are the same
    assert trivial_answer(torch, [x], [y], True, None, None) is None
    relu = torch.relu(x - 2.0)
    assert 0 < int(relu.count_nonzero()) < relu.numel() // 10
    assert trivial_answer(torch, [relu], [torch.relu(y - 2.0)], True, None, None) is None
    assert trivial_answer(torch, [(x ** 2).mean()], [(y ** 2).mean()], True, None, None) is None
    assert trivial_answer(torch, [x], [x.clone()], False, None, None) is None


def _problem(tmp_path, name, body):
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(body))
    return Problem.from_file(p)


def test_the_judge_refuses_kernelbench_80_and_serves_honest_problems(cpu_judge, tmp_path):
    from megakernel_gym.curriculum.suite import kernelbench_dir
    from megakernel_gym.rewards.pool import judge_one
    from megakernel_gym.rewards.reward_fns import gated_log_speedup
    kb80 = Problem.from_file(kernelbench_dir() / "level2" / "80_Gemm_Max_Subtract_GELU.py")
    with pytest.raises(ProblemUnservable, match="a kernel that writes zeros would be scored correct"):
        cpu_judge.evaluate(kb80, Candidate(ZEROS_KERNEL, "zeros.py"))
    res, stored = judge_one(cpu_judge, kb80, Candidate(ZEROS_KERNEL, "zeros.py"), "cpu")
    assert (res.status, res.category, stored) == ("not_run", "unservable", False)
    assert gated_log_speedup(res) == 0.0
    cached = _problem(tmp_path, "cached", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.ones(16) + 0 * x.sum()
        def get_inputs():
            return [torch.randn(16)]
        def get_init_inputs():
            return []
    """)
    with pytest.raises(ProblemUnservable, match="do not depend on the inputs"):
        cpu_judge._reference_once(cached)
    # honest problems: a scalar loss; inputs that are not random (the same for every seed)
    for name, body in [("loss", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.mean((a - b) ** 2)
        def get_inputs():
            return [torch.randn(128), torch.randn(128)]
        def get_init_inputs():
            return []
    """), ("fixed", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn(8))
            def forward(self, x):
                return x * self.w
        def get_inputs():
            return [torch.arange(8, dtype=torch.float32)]
        def get_init_inputs():
            return []
    """)]:
        cpu_judge._reference_once(_problem(tmp_path, name, body))   # served: no ProblemUnservable


def test_integer_outputs_are_trivial_only_where_they_match_exactly():
    """The judge compares integer outputs exactly; the gate does too (red team 12: a row count with RTOL 0.05 was
    refused as input-independent, its two draws within 5%, though a cached answer fails the exact check)."""
    a = torch.tensor([10, 20, 30])
    assert trivial_answer(torch, [a], [a + 1], True, None, 0.05) is None
    assert "do not depend" in trivial_answer(torch, [a], [a.clone()], True, None, 0.05)
    assert trivial_answer(torch, [torch.tensor([0, 1])], None, True, 1.0, 1.0) is None      # 1 is not 0, whatever the atol


def test_a_problem_files_tolerances_and_forbidden_list_are_checked(cpu_judge, tmp_path):
    """A problem file is untrusted input (red team 12): RTOL = math.nan passed every element (a zeros kernel scored
    correct, and the gate, comparing with <=, served it); FORBIDDEN = 5 raised out of Judge.evaluate."""
    from megakernel_gym.rewards import ProblemError
    body = """
        import math
        import torch
        import torch.nn as nn
        {line}
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x) + 1
        def get_inputs():
            return [torch.randn(64)]
        def get_init_inputs():
            return []
    """
    for line, why in [("RTOL = math.nan", "RTOL must be a finite number >= 0"),
                      ("ATOL = -1.0 * 2", "ATOL must be a finite number >= 0"),
                      ("FORBIDDEN = 5", "FORBIDDEN.* must be a list of"),      # (a literal: refused as the file loads)
                      ("DTYPES = {'float32'}", "DTYPES.* must be a list of strings"),   # (red team 17)
                      ("ATOL = 1e999", "ATOL.* must be a finite number >= 0"),
                      # computed, or bound twice: the static rules read only a literal, so these were ignored
                      ("FORBIDDEN = ['torch.' + 'relu']", "FORBIDDEN must be set once, as a literal"),
                      ("FORBIDDEN = ['torch.relu']; FORBIDDEN += ['torch.add']", "FORBIDDEN must be set once"),
                      # (red team 20: a computed SPLIT put a held-out problem in training)
                      ("SPLIT = 'held' + 'out'", "SPLIT must be set once, as a literal")]:
        with pytest.raises(ProblemError, match=why):
            p = _problem(tmp_path, "bad_" + line.split()[0].lower(), body.format(line=line))
            cpu_judge.evaluate(p, Candidate(ZEROS_KERNEL, "zeros.py"))
    p = _problem(tmp_path, "good_forbidden", body.format(line="FORBIDDEN = ['torch.relu']"))   # the honest spelling
    assert p.meta["FORBIDDEN"] == ["torch.relu"]
    p = _problem(tmp_path, "computed_tolerance", body.format(line="ATOL = 1e-3 * 10"))   # the worker reads this one
    assert "ATOL" not in p.meta and cpu_judge.evaluate(p, Candidate(ZEROS_KERNEL, "zeros.py")).category != "problem"


def test_each_output_is_its_own_test_and_a_copy_of_an_input_is_trivial_too():
    """Red team 17: a problem whose second output cancels to zeros let a kernel skip it (the gate asked that every
    output be zeros); level1/33_BatchNorm at its initial statistics, in eval mode, is its input within 1e-4, and a
    copy kernel scored correct; a reference that is all NaN is matched by a kernel writing NaN. Honest beside them:
    an output computed from the input, an output the input's shape but not its values."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    assert "output 1: every element is zero" in trivial_answer(torch, [torch.relu(x), torch.zeros(4)], None, True, None, None)
    assert "output 1: the outputs do not depend" in trivial_answer(
        torch, [torch.relu(x), torch.ones(4)], [torch.relu(y), torch.ones(4)], True, None, None)
    assert "a kernel that copies its input" in trivial_answer(torch, [x / (1 + 1e-5) ** 0.5], None, True, None, None,
                                                               inputs=[x])
    assert "a kernel that writes NaN" in trivial_answer(torch, [torch.full((8,), float("nan"))], None, True, None, None)
    assert trivial_answer(torch, [torch.relu(x), x.sum(-1)], [torch.relu(y), y.sum(-1)], True, None, None, inputs=[x]) is None
    assert trivial_answer(torch, [x * 2], None, True, None, None, inputs=[x]) is None
    # the judge's other seeds scale and shift the inputs: a trivial answer must pass there too. ReLU of
    # KernelBench's torch.rand inputs is its input, and of a shifted seed's not: served; a BatchNorm at its
    # initial statistics is its input at any scale or shift: refused
    pos, shifted = x.abs(), 4 * x.abs() - 3
    assert "copies its input" in trivial_answer(torch, [torch.relu(pos)], None, True, None, None, inputs=[pos])
    assert copied_input(torch, [torch.relu(pos)], [pos], None, None,
                        transformed=[([torch.relu(shifted)], [shifted])]) is None
    bn = (lambda t: t / (1 + 1e-5) ** 0.5)     # noqa: E731
    assert "copies its input" in copied_input(torch, [bn(pos)], [pos], None, None,
                                              transformed=[([bn(shifted)], [shifted]), ([bn(16 * pos)], [16 * pos])])
    # zeros (and NaN, and one answer for any draw) on the first seed are refused whatever the other seeds give
    # (trivial_answer takes no other seed): a kernel can tell the plain draw from a transform's and answer
    # trivially there only, or cache per transform
    tiny = torch.softmax(x * 0 + torch.arange(32.0) * 1e-3, -1) * 1e-3
    assert "zero" in trivial_answer(torch, [tiny], None, True, None, None)


def test_the_judge_refuses_batchnorm_at_its_initial_statistics(cpu_judge, tmp_path):
    """KernelBench's level1/33_BatchNorm as the judge builds it (eval mode, running statistics 0 and 1): the identity
    within 1e-4, so a copy kernel scored correct on all six seeds. Refused before any candidate runs."""
    src = (kernelbench_path("level1", "33_BatchNorm.py").read_text()
           .replace("batch_size = 64", "batch_size = 2").replace("dim1 = 512", "dim1 = 8").replace("dim2 = 512", "dim2 = 8"))
    assert "dim1 = 8" in src and "dim2 = 8" in src
    problem = Problem.from_source(src, "33_BatchNorm_small")
    with pytest.raises(ProblemUnservable, match="a kernel that copies its input"):
        cpu_judge._reference_once(problem)


def kernelbench_path(level: str, name: str):
    from megakernel_gym.curriculum.suite import kernelbench_dir
    return kernelbench_dir() / level / name
