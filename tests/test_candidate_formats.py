"""Candidates as real LLMs write them: a Markdown answer around the code, the boilerplate they
copy from the problem (an unused `import torch.nn.functional as F`, get_inputs/get_init_inputs,
the problem's own `class Model`), and the KernelBench-v3 class name `Model`. All of it is judged
on what runs; the exploits the boilerplate could hide stay rejected."""
import json
import subprocess
import sys

import pytest

from conftest import CORPUS, HERE
from megakernel_gym.rewards import Candidate, Judge, Problem
from megakernel_gym.rewards.anticheat import candidate_class, check_candidate
from megakernel_gym.rewards.problem import candidate_code, sha256

RELU = HERE / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py"

KERNEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


def triton_relu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    relu_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)
    return out


class CLASSNAME(nn.Module):
    """Applies ReLU with a custom Triton kernel."""

    def __init__(self) -> None:
        super(CLASSNAME, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_relu(x)
'''

# what the answer repeats from the problem: the judge never calls any of it
BOILERPLATE = '''

class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed
'''

INPUTS = BOILERPLATE[BOILERPLATE.index("\n\nbatch_size"):]
MODELNEW_CODE = KERNEL.replace("CLASSNAME", "ModelNew") + BOILERPLATE
ANSWER = ("I'll replace the ReLU with a custom Triton kernel: one program per block of 1024 elements,\n"
          "a masked load, `tl.where` for the max with zero, and a masked store.\n\n"
          "```python\n" + MODELNEW_CODE + "```\n\n"
          "The kernel is memory-bound, so a single pass over the data is the best one can do.\n")


@pytest.fixture(scope="module")
def relu_problem():
    return Problem.from_file(RELU)


# -- candidate_code: one reading of an answer for the CLI, the judge, the env and the service --------
def test_python_source_is_itself():
    assert candidate_code(MODELNEW_CODE) is MODELNEW_CODE
    doc = '"""Example:\n```python\nclass ModelNew: pass\n```\n"""\nclass ModelNew:\n    pass\n'
    assert candidate_code(doc) == doc   # it parses: fences inside a docstring are the code's own


def test_the_last_block_defining_modelnew_is_the_code():
    answer = ("First a helper:\n```python\ndef helper():\n    pass\n```\n"
              "A draft:\n```py\nclass ModelNew:\n    draft = 1\n```\n"
              "C++ for reference:\n```cpp\nint x;\n```\n"
              "Final:\n```\nclass ModelNew:\n    final = 1\n```\n"
              "And the problem again:\n```python\nclass Model:\n    pass\n```\nDone.")
    assert candidate_code(answer) == "class ModelNew:\n    final = 1\n"


def test_model_block_when_no_block_defines_modelnew():
    answer = "The problem:\n```python\nimport torch\n```\nMine:\n```python\nclass Model:\n    pass\n```\n"
    assert candidate_code(answer) == "class Model:\n    pass\n"


def test_a_cpp_block_does_not_open_a_python_one():
    answer = ("```cpp\n__global__ void k() {}\n```\nprose, class ModelNew in words\n"
              "```python\nclass ModelNew:\n    x = 1\n```")
    assert candidate_code(answer) == "class ModelNew:\n    x = 1\n"


def test_an_answer_cut_off_inside_its_block_still_gives_the_code():
    assert candidate_code("Here:\n```python\nclass ModelNew:\n    x = 1\n") == "class ModelNew:\n    x = 1\n"


def test_an_answer_with_windows_line_ends_gives_the_same_code():
    """A policy that writes \r\n: its closing fence ends in \r, which the fence's `$` missed, so the block ran
    on into the prose after it and the honest kernel was a syntax error (red team, session 43)."""
    answer = "Here is my kernel:\n```python\nclass ModelNew:\n    x = 1\n```\nIt is fast because...\n"
    assert candidate_code(answer.replace("\n", "\r\n")) == candidate_code(answer) == "class ModelNew:\n    x = 1\n"
    assert candidate_code(answer.replace("\n", "\r")) == "class ModelNew:\n    x = 1\n"


def test_a_kernelbench_style_answer_with_windows_line_ends_is_correct(cpu_judge, relu_problem):
    res = cpu_judge.evaluate(relu_problem, ANSWER.replace("\n", "\r\n"))
    assert res.status == "correct", res.reason
    assert res.candidate_sha256 == sha256(MODELNEW_CODE)


def test_indented_fences_are_dedented():
    assert candidate_code("1. the code:\n   ```python\n   class ModelNew:\n       x = 1\n   ```\n") == \
        "class ModelNew:\n    x = 1\n"


@pytest.mark.parametrize("text", ["def (:", "Sorry, I cannot help with that.", "```python\nimport torch\n```",
                                  "class ModelNew(:\n    pass"])
def test_no_kernel_block_leaves_the_text_as_it_is(text):
    assert candidate_code(text) is text


def test_candidate_holds_the_code_and_hashes_it(tmp_path):
    c = Candidate(ANSWER)
    assert c.source == MODELNEW_CODE and c.text == ANSWER
    assert c.sha256 == sha256(MODELNEW_CODE) == Candidate(MODELNEW_CODE).sha256
    assert Candidate(MODELNEW_CODE).text == ""   # nothing extracted: nothing else to keep
    assert Candidate(c.source) == c
    (tmp_path / "answer.md").write_text(ANSWER)
    assert Candidate.from_file(tmp_path / "answer.md").source == MODELNEW_CODE


def test_candidate_class():
    assert candidate_class(MODELNEW_CODE) == "ModelNew"   # the repeated Model is not the candidate
    assert candidate_class(KERNEL.replace("CLASSNAME", "Model")) == "Model"
    assert candidate_class("import torch\nclass MyModel:\n    pass\n") is None
    assert candidate_class("def f():\n    class ModelNew:\n        pass\n") is None   # top level only


def test_the_env_reads_actions_with_the_judges_function():
    from megakernel_gym.ir_exposure.observe import read_action
    helper_first = "Helper first:\n```python\nimport math\n```\nThen:\n" + ANSWER
    act = read_action(helper_first, "code", 100_000)
    assert act.kind == "code" and act.text == MODELNEW_CODE
    act = read_action("```python\nimport torch\n```", "code", 100_000)   # the judge says what it lacks
    assert act.kind == "code" and act.text == "import torch\n"
    assert read_action("tile lm_head n=64", "code", 100_000).kind == "invalid"
    model_only = KERNEL.replace("CLASSNAME", "Model")
    assert read_action(model_only, "code", 100_000).text == model_only


def test_the_reward_service_sends_and_hashes_the_code():
    from megakernel_gym.rewards.serve import _item, _jobs
    assert _item("relu", ANSWER)["candidate"] == MODELNEW_CODE
    (_, cand), = _jobs([{"problem": "softmax", "candidate": ANSWER}], lambda name: Problem.from_file(RELU))
    assert cand.source == MODELNEW_CODE and cand.sha256 == sha256(MODELNEW_CODE)


# -- static rules on the boilerplate -------------------------------------------------------------
def test_the_boilerplate_passes_the_static_rules():
    assert check_candidate(MODELNEW_CODE) == []


def test_the_cpp_extension_kernelbench_shows_passes_the_static_rules():
    """The shape of KernelBench's load_inline examples (flash attention): allocation with torch::full
    and torch::zeros, options, the current stream, dispatch macros and checks, all allowed."""
    src = '''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>

template <typename scalar_t>
__global__ void attn_kernel(const scalar_t* q, scalar_t* o, float* l, float* m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { o[i] = q[i]; l[i] = 0.f; }
}

torch::Tensor attn_forward(torch::Tensor q) {
    TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
    const c10::cuda::CUDAGuard guard(q.device());
    auto o = torch::zeros_like(q);
    auto l = torch::zeros({q.size(0)}, q.options().dtype(torch::kFloat32));
    auto m = torch::full({q.size(0)}, -INFINITY, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA));
    const int n = q.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(q.scalar_type(), "attn_forward", ([&] {
        attn_kernel<scalar_t><<<(n + 255) / 256, 256, 0, stream>>>(
            q.data_ptr<scalar_t>(), o.data_ptr<scalar_t>(), l.data_ptr<float>(), m.data_ptr<float>(), n);
    }));
    return o;
}
"""
cpp_source = "torch::Tensor attn_forward(torch::Tensor q);"
attn = load_inline(name="attn", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["attn_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = attn

    def forward(self, q):
        return self.attn.attn_forward(q)
'''
    assert check_candidate(src) == []
    bad = src.replace("auto o = torch::zeros_like(q);", "auto o = torch::softmax(q, -1);")
    assert {f.rule for f in check_candidate(bad)} == {"torch_compute"}


# -- the judge, end to end on the cpu backend ------------------------------------------------------
def test_a_kernelbench_style_answer_is_correct(cpu_judge, relu_problem):
    res = cpu_judge.evaluate(relu_problem, ANSWER)
    assert res.status == "correct", res.reason
    assert res.candidate_sha256 == sha256(MODELNEW_CODE)


def test_the_kernel_named_model_is_correct(cpu_judge, relu_problem):
    src = KERNEL.replace("CLASSNAME", "Model")
    res = cpu_judge.evaluate(relu_problem, "Here is the optimized Model:\n```python\n" + src + "```\n")
    assert res.status == "correct", res.reason
    res = cpu_judge.evaluate(relu_problem, src + INPUTS)   # with the inputs repeated, as v3 answers do
    assert res.status == "correct", res.reason


def test_neither_class_names_both_options(cpu_judge, relu_problem):
    res = cpu_judge.evaluate(relu_problem, KERNEL.replace("CLASSNAME", "ReluNet"))
    assert res.status == "compile_error" and res.category == "no_modelnew"
    assert "ModelNew" in res.reason and "class Model(nn.Module)" in res.reason


# ModelNew.forward reaching the repeated boilerplate: the static rules see the reference, and were
# they off, the dynamic check sees the aten ops that run
CALLS_GET_INPUTS = MODELNEW_CODE.replace("        return triton_relu(x)",
                                         "        return triton_relu(x) + 0 * get_inputs()[0][:1, :1]")
CALLS_MODEL = MODELNEW_CODE.replace("        return triton_relu(x)",
                                    "        return Model.forward(self, triton_relu(x))")


@pytest.mark.parametrize("src", [CALLS_GET_INPUTS, CALLS_MODEL], ids=["get_inputs", "Model.forward"])
def test_forward_reaching_the_boilerplate_is_rejected(cpu_judge, relu_problem, src):
    res = cpu_judge.evaluate(relu_problem, src)
    assert res.status == "rejected" and "torch_compute" in {f.rule for f in res.flags}, res.reason


@pytest.fixture(scope="module")
def dynamic_only_judge(tmp_path_factory):
    j = Judge(backend="cpu", store=tmp_path_factory.mktemp("dyn") / "r.sqlite", timeout_s=120, use_cache=False,
              static_checks=False, python_guard=False)
    yield j
    j.close()


def test_the_dynamic_check_catches_what_forward_reaches(dynamic_only_judge, relu_problem):
    for src in (CALLS_GET_INPUTS, CALLS_MODEL):
        res = dynamic_only_judge.evaluate(relu_problem, src)
        assert res.status == "rejected" and res.category == "dynamic", res.reason
        assert "torch_compute" in {f.rule for f in res.flags}, res.reason


def test_mkgym_judge_takes_an_answer_on_stdin(tmp_path):
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "judge", str(RELU), "-", "--backend", "cpu",
                        "--json", "--store", str(tmp_path / "r.sqlite")],
                       capture_output=True, text=True, input=ANSWER, timeout=600)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "correct", d["reason"]
    assert d["candidate_sha256"] == sha256(MODELNEW_CODE)


def test_corpus_header_reader_still_reads_markdown_candidates():
    from conftest import read_expectation
    exp = read_expectation(CORPUS / "adversarial" / "markdown_last_block.py")
    assert exp["status"] == "rejected" and "torch.softmax" in Candidate(exp["source"]).source
