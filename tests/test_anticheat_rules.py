"""Static rules on small snippets: each rule fires where it should and stays quiet on legit code."""
import pytest

from megakernel_gym.rewards.anticheat import check_candidate, check_source_text

HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def rules(src: str, extra=()) -> set[str]:
    return {f.rule for f in check_candidate(HEAD + src, extra)}


@pytest.mark.parametrize("src,rule", [
    ("y = torch.matmul(a, b)", "torch_compute"),
    ("y = a.matmul(b)", "torch_compute"),
    ("y = a @ b", "torch_compute"),
    ("from torch import einsum\ny = einsum('ij,jk->ik', a, b)", "torch_compute"),
    ("import torch as T\ny = T.bmm(a, b)", "torch_compute"),
    ("y = torch.ops.aten.mm.default(a, b)", "torch_compute"),
    ("f = torch.compile", "torch_compute"),
    ("import torch.nn.functional as F", "torch_compute"),
    ("from torch.nn import functional", "torch_compute"),
    ("y = x.sum(-1)", "torch_compute"),
    ("try:\n    pass\nexcept Exception:\n    pass", "try_except"),
    ("torch.matmul = None", "monkeypatch"),
    ("nn.Module.__call__ = None", "monkeypatch"),
    ("setattr(torch, 'mm', None)", "monkeypatch"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "monkeypatch"),
    ("import time", "timing"),
    ("e = torch.cuda.Event(enable_timing=True)", "timing"),
    ("from triton.testing import do_bench", "timing"),
    ("import threading", "concurrency"),
    ("s = torch.cuda.Stream()", "concurrency"),
    ("g = torch.cuda.CUDAGraph()", "concurrency"),
    ("s = torch.initial_seed()", "seed_access"),
    ("st = torch.cuda.get_rng_state()", "seed_access"),
    ("import random", "seed_access"),
    ("import os", "forbidden_import"),
    ("import numpy", "forbidden_import"),
    ("from megakernel_gym.curriculum.references import softmax_triton", "forbidden_import"),
    ("import megakernel_gym\nk = megakernel_gym.load_kernel('x')", "forbidden_import"),
    ("from megakernel_gym.rewards import judge", "forbidden_import"),
    ("from . import x", "forbidden_import"),
    ("import sys", "introspection"),
    ("k = torch.os", "introspection"),
    ("c = x.__class__", "introspection"),
    ("b = __builtins__", "introspection"),
    ("eval('1')", "introspection"),
    ("g = getattr(torch, 'mm')", "introspection"),
    ("exit()", "introspection"),
    ("global Z", "monkeypatch"),
])
def test_rule_fires(src, rule):
    assert rule in rules(src)


def test_problem_forbidden_names():
    assert "problem_forbidden" in rules("y = torch.empty(3)\nz = cumsum", extra=["cumsum"])


def test_kernel_bodies_may_compute():
    src = '''
@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    s = tl.sum(x, axis=0)
    tl.store(y_ptr + offs, tl.exp(x - tl.max(x, axis=0)) / s, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))
        self.lin = nn.Linear(n, n)
        nn.init.zeros_(self.w)

    def forward(self, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
        return y.view(x.shape)
'''
    assert rules(src) == set()


@pytest.mark.parametrize("cuda,rule", [
    ("#include <cublas_v2.h>\n__global__ void k(){}", "forbidden_library"),
    ("__global__ void k(){ cudnnCreate(0); }", "forbidden_library"),
    ("torch::Tensor f(torch::Tensor a){ return torch::matmul(a, a); }", "torch_compute"),
    ("torch::Tensor f(torch::Tensor a){ return a.matmul(a); }", "torch_compute"),
    ("__global__ void k(){}\nvoid h(){ cudaStream_t s; cudaStreamCreate(&s); }", "concurrency"),
    ("#include <unistd.h>\n__global__ void k(){}", "introspection"),
    ("void h(){ system(\"rm -rf /\"); } __global__ void k(){}", "introspection"),
])
def test_source_rules(cuda, rule):
    assert rule in {f.rule for f in check_source_text(cuda)}


def test_source_rules_quiet_on_plain_kernel_and_comments():
    src = ('// cublas would be slower here\n#include <cuda_bf16.h>\n'
           'extern "C" __global__ void k(float* y){ y[threadIdx.x] = 0.f; }\n'
           'torch::Tensor launch(torch::Tensor x){ auto y = torch::empty_like(x); return y; }')
    assert check_source_text(src) == []


def test_cuda_string_inside_candidate_is_scanned():
    src = 'SRC = r"""\n#include <cublas_v2.h>\n__global__ void k(){}\n"""\n'
    flags = check_candidate(HEAD + src)
    assert [f.rule for f in flags] == ["forbidden_library"]
    assert flags[0].line == 6  # points into the string, at the include (HEAD is 4 lines)


def test_syntax_error_raises():
    with pytest.raises(SyntaxError):
        check_candidate("def (:")


def test_the_nvrtc_loader_is_all_a_candidate_may_use_of_the_package():
    for src in ("from megakernel_gym import load_cuda\nm = load_cuda('src', 'k')",
                "import megakernel_gym\nm = megakernel_gym.load_cuda('src', 'k')",
                "import megakernel_gym as mg\nm = mg.load_cuda('src', 'k')"):
        assert rules(src) == set(), src
    assert rules("import megakernel_gym as mg\nr = mg.curriculum.reference_candidates('softmax')") == \
        {"forbidden_import"}
