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
    ("import torch.nn.functional as F\ny = F.relu(x)", "torch_compute"),
    ("import torch.nn.functional as F\ng = F", "torch_compute"),
    ("from torch.nn import functional\ny = functional.gelu(x)", "torch_compute"),
    ("from torch.nn.functional import relu\ny = relu(x)", "torch_compute"),
    ("from torch import compile\nf = compile", "torch_compute"),
    ("from torch import _C\nk = _C._get_tracing_state", "torch_compute"),
    ("def f(x):\n    return F.hardswish(x)\nimport torch.nn.functional as F", "torch_compute"),
    ("def f():\n    return T.cuda.Stream()\nimport torch as T", "concurrency"),
    ("from torch.cuda import Event\ne = Event()", "timing"),
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
    ("def g():\n    yield 1\nimp = g().gi_frame.f_builtins['__import__']", "introspection"),
    ("def g():\n    yield 1\nf = g().gi_frame.f_back.f_globals", "introspection"),
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


@pytest.mark.parametrize("src", [
    "import torch.nn.functional as F",
    "import torch.nn.functional",
    "from torch.nn import functional",
    "from torch.nn.functional import relu",
    "from torch.nn import functional as F, init",
    "import torch.nn.functional as F\ny = torch.empty(3)\nF2 = None",
])
def test_unused_torch_imports_pass(src):
    """KernelBench's own example kernels start with `import torch.nn.functional as F`, unused."""
    assert rules(src) == set(), src


# What LLM answers repeat after their kernel: the problem's Model and its input functions.
BOILERPLATE = '''
class Model(nn.Module):
    def __init__(self, dim):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, dim=self.dim) @ x.t() + F.relu(x).sum() + torch.linalg.norm(x)


def get_inputs():
    return [torch.randn(16, 256).abs() * 2]


def get_init_inputs():
    return [torch.rand(1).item()]
'''
MODELNEW = '''
class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)
'''
F_IMPORT = "import torch.nn.functional as F\n"


def test_definitions_the_judge_never_calls_may_compute():
    assert rules(F_IMPORT + MODELNEW + BOILERPLATE) == set()


def test_model_is_the_candidate_when_there_is_no_modelnew():
    assert "torch_compute" in rules(F_IMPORT + BOILERPLATE)


@pytest.mark.parametrize("change,rule", [
    # reached from code that runs: the exemption is off
    ("class ModelNew(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
     "        self.x = get_init_inputs()\n", "torch_compute"),
    ("class ModelNew(Model):\n    pass\n", "torch_compute"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return Model.forward(self, x)\n", "torch_compute"),
    ("X = get_inputs()\n", "torch_compute"),
    ("H = [get_inputs]\n", "torch_compute"),
    ("def stash(f):\n    return f\n\n@stash\ndef get_inputs():\n    return [torch.randn(3)]\n", "torch_compute"),
    ("class Meta(type):\n    pass\n\nclass Model(nn.Module, metaclass=Meta):\n"
     "    def forward(self, x):\n        return torch.relu(x)\n", "torch_compute"),
    ("class Base(nn.Module):\n    pass\n\nclass Model(Base):\n    def forward(self, x):\n"
     "        return torch.relu(x)\n", "torch_compute"),
    ("class Model(nn.Module):\n    W = torch.randn(4) @ torch.randn(4)\n", "torch_compute"),
    ("def get_inputs(a=torch.mm(torch.ones(2, 2), torch.ones(2, 2))):\n    return [a]\n", "torch_compute"),
    ("def get_inputs():\n    return [torch.randn(3)]\n\ndef helper():\n    return get_inputs()\n", "torch_compute"),
    # every other rule still holds inside them
    ("def get_inputs():\n    import os\n    return [torch.randn(3)]\n", "forbidden_import"),
    ("def get_inputs():\n    try:\n        pass\n    except Exception:\n        pass\n", "try_except"),
    ("def get_inputs():\n    torch.manual_seed(0)\n    return [torch.randn(3)]\n", "seed_access"),
    ("def get_inputs():\n    return [torch.compile(torch.randn)(3)]\n", "torch_compute"),
    ("def get_inputs():\n    return [torch.ops.aten.randn(3)]\n", "torch_compute"),
    ("def get_inputs():\n    return [torch._C._nn.gelu(torch.randn(3))]\n", "torch_compute"),
    ("def get_init_inputs():\n    torch.matmul = None\n    return []\n", "monkeypatch"),
    ("def get_init_inputs():\n    e = torch.cuda.Event()\n    return []\n", "timing"),
    ("def get_init_inputs():\n    return [torch.os]\n", "introspection"),
    ("def get_init_inputs():\n    return [eval('1')]\n", "introspection"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        return x.__class__\n", "introspection"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        s = torch.cuda.Stream()\n", "concurrency"),
    ("def get_inputs():\n    return ['#include <cublas_v2.h>\\n__global__ void k(){}']\n", "forbidden_library"),
    ("def get_inputs():\n    return ['torch::Tensor f(torch::Tensor a){ return torch::matmul(a, a); }']\n",
     "torch_compute"),
])
def test_unjudged_exemption_holds_only_while_nothing_reaches_them(change, rule):
    src = F_IMPORT + MODELNEW + BOILERPLATE + "\n" + change
    assert rule in rules(src), change


def test_problem_forbidden_names_still_fire_outside_unjudged_code():
    src = F_IMPORT + MODELNEW + BOILERPLATE
    assert rules(src, extra=["softmax"]) == set()
    assert "problem_forbidden" in rules(src + "\ny = torch.softmax", extra=["softmax"])


@pytest.mark.parametrize("cuda", [
    "torch::Tensor f(torch::Tensor q){ auto o = torch::full({q.size(0)}, -INFINITY, q.options()); return o; }",
    "auto y = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA));",
    "auto y = at::zeros_like(x); auto z = torch::ones_like(x); auto w = at::full_like(x, 1.0);",
    "auto y = torch::empty_strided({2, 2}, {2, 1}, torch::dtype(torch::kHalf).device(torch::kCUDA, 0));",
    "at::Tensor f(const at::Tensor& x, torch::IntArrayRef s){ at::ScalarType t = x.scalar_type(); return x; }",
    "auto s = at::cuda::getCurrentCUDAStream(); const at::cuda::OptionalCUDAGuard g(device_of(x));",
    "const c10::cuda::CUDAGuard guard(x.device()); c10::Half h; at::Half a; at::BFloat16 b; c10::BFloat16 c;",
    "auto t = {torch::kFloat, torch::kFloat16, torch::kBFloat16, torch::kInt32, torch::kInt64, torch::kLong,"
    " torch::kDouble, torch::kBool, torch::kUInt8, at::kHalf, at::kFloat};",
    "TORCH_CHECK(x.is_cuda(), \"x must be CUDA\"); TORCH_CHECK(x.numel() == x.size(0) * x.size(1));\n"
    "AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), \"k\", ([&] {\n"
    "  k<scalar_t><<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<scalar_t>(), "
    "x.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(), x.numel());\n}));",
    "using acc = at::acc_type<scalar_t, true>; torch::PackedTensorAccessor32<float, 2> a;",
])
def test_source_rules_let_allocation_and_accessors_pass(cuda):
    assert check_source_text("__global__ void k(){}\n" + cuda) == [], cuda


@pytest.mark.parametrize("cuda", [
    "auto y = torch::matmul(a, b);", "auto y = at::mm(a, b);", "auto y = torch::softmax(x, -1);",
    "auto y = at::native::softmax(x, -1, false);", "auto y = torch::relu(x);", "auto y = at::addmm(c, a, b);",
    "auto y = torch::nn::functional::gelu(x);", "auto y = at::cuda::getStreamFromPool();",
    "auto y = torch::full_something(x);", "auto y = at::_softmax(x, 1, false);", "auto y = x.matmul(w);",
    "auto y = torch::zeros_like(x).mm(w);",
])
def test_source_rules_still_refuse_compute(cuda):
    assert "torch_compute" in {f.rule for f in check_source_text("__global__ void k(){}\n" + cuda)}, cuda


@pytest.mark.parametrize("cuda,rule", [
    ("#include <cublasLt.h>\nauto y = torch::empty({1});", "forbidden_library"),
    ("#include <cudnn.h>", "forbidden_library"),
    ("#include <cutlass/gemm/device/gemm.h>", "forbidden_library"),
])
def test_source_rules_still_refuse_libraries(cuda, rule):
    assert rule in {f.rule for f in check_source_text("__global__ void k(){}\n" + cuda)}


MAIN_GUARD = """
class ModelNew(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return [torch.randn(8)]

if __name__ == "__main__":   # an LLM's smoke test of its answer: never runs in the judge
    m = ModelNew()
    x = get_inputs()[0]
    print(torch.allclose(m(x), torch.relu(x)))
"""


def test_a_main_guard_is_not_judged_code():
    assert rules(MAIN_GUARD) == set()


def test_a_main_guard_runs_once_name_is_rebound():
    assert "torch_compute" in rules("__name__ = '__main__'\n" + MAIN_GUARD)


def test_other_rules_still_hold_inside_a_main_guard():
    assert "monkeypatch" in rules(MAIN_GUARD + "    torch.backends.cuda.matmul.allow_tf32 = True\n")
    assert "forbidden_import" in rules(MAIN_GUARD + "    import os\n")


# Deep syntax trees: an honest generated expression (a 900-term sum, a long chain of indexing) is checked, not
# refused with a RecursionError at Python's default 1,000 frames; each shape in linear time (a wrapper that walked
# its subtree again made a 900-deep `x[0][0]...` take 1.6 s and 2,000 deep ~8 s); past the depth the checks
# follow, a clear refusal. problem.deep_call runs them.
DEEP = {
    "sum": lambda n: "+".join(["1"] * n),
    "power": lambda n: "**".join(["1"] * n),
    "index": lambda n: "x" + "[0]" * n,
    "attribute": lambda n: "x" + ".data" * n,
    "negation": lambda n: "-" * n + "x",
    "conditional": lambda n: "x if x else " * n + "x",
}


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deep_expression_checked_in_linear_time(shape):
    import sys
    import time

    from megakernel_gym.rewards.guard import compile_candidate
    from megakernel_gym.rewards.problem import MAX_AST_DEPTH
    limit = sys.getrecursionlimit()
    src = f"{HEAD}\ndef f(x):\n    return {DEEP[shape](MAX_AST_DEPTH - 20)}\n"
    t0 = time.perf_counter()
    assert "guard" not in rules(src)
    assert compile_candidate(src, "<deep>").co_filename == "<deep>"
    assert time.perf_counter() - t0 < 3.0, f"{shape}: {time.perf_counter() - t0:.1f} s"
    assert sys.getrecursionlimit() == limit


def test_too_deep_refused_by_name():
    from megakernel_gym.rewards.guard import compile_candidate
    from megakernel_gym.rewards.problem import MAX_AST_DEPTH, SourceTooDeep
    src = f"{HEAD}\ny = {DEEP['sum'](MAX_AST_DEPTH + 50)}\n"
    for check in (lambda: check_candidate(src), lambda: compile_candidate(src, "<deep>")):
        with pytest.raises(SourceTooDeep, match=r"nests \d+ levels deep .* split it into several statements"):
            check()


def test_deep_walks_at_once_put_the_limit_back():
    """The raised recursion limit is the interpreter's: two deep checks at once, one of them failing inside,
    leave it where it was."""
    import sys
    import threading

    from megakernel_gym.rewards.problem import deep_call
    limit, seen, errors = sys.getrecursionlimit(), [], []
    gate = threading.Barrier(2)

    def walk(fail):
        def fn():
            gate.wait(timeout=10)
            seen.append(sys.getrecursionlimit())
            if fail:
                raise KeyError("inside")
            return 1
        try:
            deep_call(fn, depth=1_000)
        except KeyError as e:
            errors.append(e)

    threads = [threading.Thread(target=walk, args=(fail,)) for fail in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1 and min(seen) > limit
    assert sys.getrecursionlimit() == limit


def test_kernel_source_rules_take_linear_time_on_unclosed_comments():
    """The CUDA-text rules run in the judge's own process, before any worker or time limit. Stripping comments
    with /\\*.*?\\*/ rescanned the rest of the text from every unclosed '/*': red team 11's 120 KB string of
    '/*a' (under the env's 120,000-character action limit) held the judge 47 s, 1 MB would be an hour."""
    import time
    src = f'{HEAD}\nNOTE = "__global__ " + {"/*a" * 40_000!r}\nSRC = "__global__ void k() {{ cublasSgemm(); }} /* x"\n'
    t0 = time.perf_counter()
    assert "forbidden_library" in rules(src)         # the rules still read past an unclosed comment's start
    assert time.perf_counter() - t0 < 5.0, f"{time.perf_counter() - t0:.1f} s"


def test_a_candidate_past_the_size_limit_is_a_compile_error(cpu_judge):
    from megakernel_gym.curriculum import get_problem
    from megakernel_gym.rewards.judge import MAX_CANDIDATE_CHARS
    res = cpu_judge.evaluate(get_problem("softmax"), "# x\n" * (MAX_CANDIDATE_CHARS // 4 + 1))
    assert res.status == "compile_error" and "at most 1,000,000" in res.reason


def test_an_answer_past_the_size_limit_is_not_parsed_for_its_code():
    """The limit applies to the whole answer before its code block is looked for: a 1.2M-character answer of
    300k lines and a fenced block was parsed whole (8M characters: 28 s and 5.9 GB, red team 12)."""
    import time

    from megakernel_gym.rewards import Candidate
    from megakernel_gym.rewards.problem import MAX_CANDIDATE_CHARS
    text = "x=1\n" * (MAX_CANDIDATE_CHARS // 4) + "```python\nclass ModelNew:\n    pass\n```\n"
    t0 = time.perf_counter()
    c = Candidate(text)
    assert c.source == text and time.perf_counter() - t0 < 1.0


def test_a_jit_body_reads_at_launch_only_what_the_rules_read(monkeypatch):
    """jit_rules.launch_globals_problem, the wall behind the jit-body rules (red team 23): Triton's CPU interpreter
    runs a body in its module's globals as they are at launch, so each name the body reads must hold then what the
    rules allowed from the file: triton.language and math as imported, constants (a constexpr of one), dtypes and
    jit functions; never a Python function, a stand-in module or a module's own `min`."""
    import ast
    import math
    import types

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl

    from megakernel_gym.rewards.jit_rules import launch_globals_problem
    src = ("import triton\nimport triton.language as tl\nimport math\nSM = 0\n@triton.jit\n"
           "def k(x_ptr, BLOCK: tl.constexpr = 4):\n    v = tl.load(x_ptr + tl.arange(0, BLOCK))\n"
           "    w = min(v, SM) * math.pi + other(v)\n    tl.store(x_ptr, w)\n")
    fn = ast.parse(src).body[4]

    @triton.jit
    def other(v):
        return v

    ok = {"tl": tl, "math": math, "triton": triton, "SM": 0, "other": other}
    assert launch_globals_problem(fn, ok) == ""
    assert launch_globals_problem(fn, dict(ok, SM=tl.constexpr(3))) == ""
    assert launch_globals_problem(fn, dict(ok, SM=tl.float32)) == ""
    for bad, why in ((dict(ok, SM=lambda *a: a), "SM in the @triton.jit function k is a function"),
                     (dict(ok, SM=tl.constexpr(print)), "SM in the @triton.jit function k is a constexpr"),
                     (dict(ok, tl=types.ModuleType("triton.language")), "tl in the @triton.jit function k is a module"),
                     (dict(ok, other=lambda v: v), "other in the @triton.jit function k is a function"),
                     (dict(ok, min=lambda a, b: a), "the module binds min")):
        assert why in launch_globals_problem(fn, bad), why
