"""The fast load_inline path (rewards/inline/) on the CPU: its NVRTC compile, and its host-code
interpreter run as a dry run (launches recorded, not run). The GPU side, and the comparison with
torch's own build, are gpu-marked (tests/test_honest_corpus_gpu.py) and benched
(bench/judge_kb_format.py)."""
import inspect
import re
from pathlib import Path

import pytest
import torch

from conftest import CORPUS
from megakernel_gym.rewards import Candidate, inline
from megakernel_gym.cuda.nvrtc import CudaCompileError, CudaUnavailableError
from megakernel_gym.rewards.kernel_accounting import _function_name

KERNEL = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_INPUT(x) CHECK_CUDA(x); TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
constexpr int TILE = 128;

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s + INFINITY * 0.0f;
}

template <typename T, int B>
__global__ void __launch_bounds__(256) copy_kernel(const T* x, T* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * B + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def build(host: str, functions, cpp: str = "", **kw):
    """The fast module for KERNEL + host, every launch recorded instead of run."""
    mod = inline.translate("t", cpp, KERNEL + host, functions, **kw)
    launches = []
    for f in mod._functions.values():
        f.program.launcher = lambda *a: launches.append(a)
    return mod, launches


def test_the_usual_wrapper_allocates_computes_a_grid_and_launches():
    mod, launches = build(r"""
torch::Tensor scale(torch::Tensor x, double s) {
    CHECK_INPUT(x);
    auto n = x.numel();
    auto y = torch::empty_like(x);
    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    scale_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}""", ["scale"])
    x = torch.randn(3, 333)
    y = mod.scale(x, 2.5)
    assert y.shape == x.shape and y.dtype == x.dtype and y.data_ptr() != x.data_ptr()
    [(name, grid, block, smem, stream, args)] = launches
    assert name == "scale_kernel" and grid == (4, 1, 1) and block == (256, 1, 1) and smem == 0
    assert stream == 0    # <<<>>> without a stream: the legacy default stream, as nvcc's launch
    assert int(args[0]) == x.data_ptr() and int(args[1]) == y.data_ptr()
    assert args[2].dtype.name == "float32" and float(args[2]) == 2.5 and args[3].dtype.name == "int32"


def test_templates_dim3_dispatch_stream_and_file_constants():
    mod, launches = build(r"""
torch::Tensor copy(torch::Tensor x) {
    auto y = torch::zeros({x.size(0), x.size(1)}, x.options());
    dim3 grid((x.numel() + TILE - 1) / TILE);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "copy", ([&] {
        copy_kernel<scalar_t, TILE><<<grid, TILE, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
    }));
    return y;
}""", ["copy"])
    program = mod._functions["copy"].program
    assert set(program.lowered) == {"copy_kernel<float, 128>", "copy_kernel<double, 128>"}
    mod.copy(torch.randn(5, 100))
    mod.copy(torch.randn(5, 100, dtype=torch.float64))
    assert [(n, g, s) for n, g, _, _, s, _ in launches] == [("copy_kernel<float, 128>", (4, 1, 1), None),
                                                            ("copy_kernel<double, 128>", (4, 1, 1), None)]
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):   # as AT_DISPATCH says it
        mod.copy(torch.randn(5, 100).half())


def test_dispatch_and2_takes_pytorchs_form():
    """AT_DISPATCH_FLOATING_TYPES_AND2 takes its two scalar types first, as PyTorch's Dispatch.h defines it (the
    interpreter took a three-argument form that g++ refuses, and refused PyTorch's own). Float and double run; a half
    tensor is named as dispatched, and refused as a type the interpreter does not run; bfloat16 not named is
    'not implemented', as AT_DISPATCH says it."""
    body = r"""
torch::Tensor copy(torch::Tensor x) {
    auto y = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::ScalarType::Double, x.scalar_type(), "copy", [&] {
        copy_kernel<scalar_t, TILE><<<(x.numel() + TILE - 1) / TILE, TILE>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
    });
    return y;
}"""
    mod, launches = build(body, ["copy"])
    assert set(mod._functions["copy"].program.lowered) == {"copy_kernel<float, 128>", "copy_kernel<double, 128>"}
    mod.copy(torch.randn(5, 100))
    assert [n for n, *_ in launches] == ["copy_kernel<float, 128>"]
    with pytest.raises(inline.Unsupported, match="on at::Half"):
        mod.copy(torch.randn(5, 100).half())
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        mod.copy(torch.randn(5, 100).bfloat16())
    with pytest.raises(inline.Unsupported, match=r"not of the form .*\(at::kHalf, at::kBFloat16, type"):
        build(body.replace("at::kHalf, at::ScalarType::Double, ", ""), ["copy"])


def test_c_integer_semantics():
    """int wraps at 32 bits, division truncates toward zero, unsigned mixes as C says."""
    mod, launches = build(r"""
torch::Tensor ints(torch::Tensor x) {
    int big = 2147483647;
    big = big + 1;                       // wraps to INT_MIN
    int q = -7 / 2;                      // -3, not -4
    int r = -7 % 2;                      // -1
    unsigned int u = 0;
    u = u - 1;                           // 4294967295
    long long wide = (long long)2147483647 + 1;
    TORCH_CHECK(big == -2147483647 - 1 && q == -3 && r == -1 && u == 4294967295u && wide == 2147483648LL,
                "C semantics: ", big, " ", q, " ", r, " ", u, " ", wide);
    TORCH_CHECK((-1 < u) == false, "int converts to unsigned in a mixed comparison");
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), x.data_ptr<float>(), 1.0f, n);
    return x;
}""", ["ints"])
    mod.ints(torch.zeros(10))
    assert launches[0][1] == (1, 1, 1)


def test_checks_raise_like_the_extension():
    mod, _ = build(r"""
torch::Tensor scale(torch::Tensor x) {
    CHECK_INPUT(x);
    TORCH_CHECK(x.dim() == 2, "expected 2D, got ", x.dim(), "D");
    auto y = torch::empty_like(x);
    scale_kernel<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), 1.0f, (int)x.numel());
    return y;
}""", ["scale"])
    with pytest.raises(RuntimeError, match="expected 2D, got 1D"):
        mod.scale(torch.zeros(4))
    with pytest.raises(RuntimeError, match="x must be contiguous"):   # #x stringified, as cpp does
        mod.scale(torch.zeros(4, 4).t())
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        mod.scale(torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mod.scale(3.0)


def test_vectors_of_outputs_and_last_error():
    mod, _ = build(r"""
std::vector<torch::Tensor> two(torch::Tensor x) {
    auto a = torch::empty({x.size(0)}, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
    auto b = torch::full({2, 3}, 1.5, x.options());
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) { throw std::runtime_error(cudaGetErrorString(err)); }
    return {a, b};
}""", ["two"])
    a, b = mod.two(torch.zeros(7))
    assert a.shape == (7,) and a.dtype == torch.float32 and b.shape == (2, 3) and float(b[0, 0]) == 1.5


def test_pybind11_module_names_the_functions():
    host = r"""
torch::Tensor impl(torch::Tensor x) {
    auto y = torch::empty_like(x);
    scale_kernel<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), 2.0f, (int)x.numel());
    return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &impl, "scale by two"); }
"""
    mod, launches = build(host, None)
    mod.forward(torch.zeros(3))
    assert launches and list(mod._functions) == ["forward"]


@pytest.mark.parametrize("host,why", [
    ("torch::Tensor f(torch::Tensor x) { return torch::matmul(x, x); }", "a call to torch::matmul"),
    ("torch::Tensor f(torch::Tensor x) { return softmax(x, 1); }", "argument-dependent lookup"),
    ("torch::Tensor f(torch::Tensor x) { float* p = x.data_ptr<float>(); p[0] = 1; return x; }", "a write to p[...]"),
    ("#if 1\n#endif\ntorch::Tensor f(torch::Tensor x) { return x; }", "conditional compilation"),
])
@pytest.mark.parametrize("gpu", [False, True])
def test_what_the_subset_cannot_take_is_a_compile_error_naming_it(host, why, gpu):
    """No fallback to torch's real build (the host C++ would run natively in the candidate's process): the
    source is refused at load, on any machine, as a compile_error that names the construct and says what
    the interpreter takes."""
    with pytest.raises(inline.Unsupported) as e:
        inline.load_inline("t", "", KERNEL + host, functions=["f"], gpu=gpu)
    assert isinstance(e.value, CudaCompileError) and e.value.category == "host_code"
    assert why in str(e.value) and str(e.value).startswith("t: the judge's load_inline cannot take")
    assert inline.SUPPORTED_HOST_SUBSET in str(e.value) and inline.SUPPORTED_HOST_SUBSET in e.value.log
    assert "fallback" not in inspect.signature(inline.load_inline).parameters


def test_without_a_gpu_it_compiles_and_says_what_running_needs():
    host = "torch::Tensor f(torch::Tensor x) { auto y = torch::empty_like(x); " \
           "scale_kernel<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), 2.0f, (int)x.numel()); return y; }"
    mod = inline.load_inline("t", "", KERNEL + host, functions=["f"], extra_cflags=[""], extra_ldflags=[""],
                             gpu=False)
    with pytest.raises(CudaUnavailableError, match="needs the gpu backend"):
        mod.f(torch.zeros(3))
    with pytest.raises(CudaCompileError) as e:   # NVRTC's verdict is final: no nvcc build to try instead
        inline.load_inline("t", "", KERNEL.replace("y[i] = x[i] * s", "y[i] = undefined_name * s") + host,
                           functions=["f"], gpu=False)
    assert "undefined_name" in str(e.value) and not isinstance(e.value, inline.Unsupported)
    with pytest.raises(CudaCompileError):
        inline.translate("t", "", "__global__ void k() { nope; }\n" + host, ["f"])


POINTERS = r"""
#include <cuda_fp16.h>
__global__ void dbl(const double* x, double* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = x[threadIdx.x]; }
__global__ void vec4(const float4* x, float4* y) { y[0] = x[0]; }
__global__ void raw(const void* x, void* y) {}
__global__ void hlf(const __half* x, __half* y) { y[0] = x[0]; }
"""


@pytest.mark.parametrize("call,verdict", [
    ("dbl<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), 1)", "load"),       # float* for const double*
    ("dbl<<<1, 32>>>((double*)x.data_ptr(), (double*)y.data_ptr(), 1)", "runs"),    # a cast says what it points to
    ("dbl<<<1, 32>>>(x.data_ptr(), y.data_ptr(), 1)", "load"),                      # void* does not convert to double*
    ("float* p = x.data_ptr<float>(); dbl<<<1, 32>>>(p, p, 1)", "call"),           # seen only when it runs
    ("vec4<<<1, 1>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()), "
     "reinterpret_cast<float4*>(y.data_ptr<float>()))", "runs"),
    ("vec4<<<1, 1>>>(reinterpret_cast<const float2*>(x.data_ptr<float>()), (float4*)y.data_ptr())", "load"),
    ("raw<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr())", "runs"),                   # anything converts to void*
    ("hlf<<<1, 1>>>(reinterpret_cast<__half*>(x.data_ptr<float>()), (half*)y.data_ptr())", "runs"),  # half is __half
    ("hlf<<<1, 1>>>((at::Half*)x.data_ptr(), (__half*)y.data_ptr())", "load"),      # torch's Half is another type
])
def test_a_pointer_argument_nvcc_would_refuse_is_a_compile_error(call, verdict):
    """nvcc refuses a launch whose pointer argument points to another type than the parameter, so the real
    load_inline would not build the extension: the fast path gives the same compile_error (at load where the
    types are in the text, else when the launch runs), and never runs the kernel."""
    src = POINTERS + "torch::Tensor f(torch::Tensor x) { auto y = torch::empty_like(x); " + call + "; return y; }"
    if verdict == "load":
        with pytest.raises(inline.BuildError, match="is incompatible with parameter of type") as e:
            inline.translate("t", "", src, ["f"])
        assert isinstance(e.value, CudaCompileError)   # the judge's compile_error
        return
    mod = inline.translate("t", "", src, ["f"])
    launches = []
    mod._functions["f"].program.launcher = lambda *a: launches.append(a)
    if verdict == "runs":
        mod.f(torch.zeros(4))
        assert len(launches) == 1
    else:
        with pytest.raises(inline.BuildError, match="is incompatible with parameter of type"):
            mod.f(torch.zeros(4))
        assert not launches


def test_a_failed_launch_nobody_checks_is_raised_when_the_call_returns():
    """CUDA keeps a failed launch's error pending; torch's check after its next kernel raises it, right
    after the extension's call returns. A wrapper that reads cudaGetLastError itself decides instead."""
    unchecked = "torch::Tensor f(torch::Tensor x) { auto y = torch::empty_like(x); " \
                "scale_kernel<<<1, 2048>>>(x.data_ptr<float>(), y.data_ptr<float>(), 1.0f, 4); return y; }"
    checked = unchecked.replace("return y;", "cudaError_t e = cudaGetLastError(); return y;")

    def failing(*a):
        raise type("LaunchError", (Exception,), {"status": 1})("invalid argument")
    mod = inline.translate("t", "", KERNEL + unchecked, ["f"])
    mod._functions["f"].program.launcher = failing
    with pytest.raises(inline.CudaRuntimeError, match="cudaErrorInvalidValue.*not checked"):
        mod.f(torch.zeros(4))
    mod._functions["f"].program.launcher = lambda *a: None
    assert mod.f(torch.zeros(4)).shape == (4,)      # nothing pending from the failed call before
    mod = inline.translate("t", "", KERNEL + checked, ["f"])
    mod._functions["f"].program.launcher = failing
    assert mod.f(torch.zeros(4)).shape == (4,)      # the wrapper read the error and went on


def test_the_real_build_failing_is_a_compile_error_with_its_log():
    """torch's load_inline raising 'Error building extension' becomes a BuildError (a compile_error)
    carrying the compiler's output, which verbose=False keeps in the error instead of printing it."""
    seen = []

    def torch_build(*a, **kw):
        seen.append(kw.get("verbose"))
        if a[0] == "bad":
            raise RuntimeError("Error building extension 'bad': [1/3] /usr/local/cuda/bin/nvcc -Werror=x -c relu.cu\n"
                               "FAILED: relu.cuda.o\nrelu.cu(9): error: expected a \";\"\n1 error detected\n"
                               "ninja: build stopped: subcommand failed.")
        raise RuntimeError("Ninja is required to load C++ extensions")
    build = inline.real_build(torch_build)
    with pytest.raises(inline.BuildError, match='expected a ";"') as e:
        build("bad", "", cuda_sources="", verbose=True)
    assert isinstance(e.value, CudaCompileError) and 'expected a ";"' in e.value.log and seen == [False]
    # what the agent reads first is the compiler's error, not the command lines
    assert str(e.value).splitlines()[1:] == ['relu.cu(9): error: expected a ";"', "1 error detected"]
    with pytest.raises(RuntimeError, match="Ninja is required") as e:   # not a build failure: as it was
        build("other", "")
    assert not isinstance(e.value, CudaCompileError)


def test_torch_build_defines_apply_to_the_device_code():
    """torch's nvcc flags forbid __half operators; NVRTC gets the same defines, so the verdicts agree."""
    src = "#include <cuda_fp16.h>\n__global__ void h(__half* x) { x[0] = x[0] + x[0]; }\n" \
          "torch::Tensor f(torch::Tensor x) { h<<<1, 1>>>((__half*)x.data_ptr()); return x; }"
    with pytest.raises(CudaCompileError):
        inline.translate("t", "", src, ["f"])


def test_kernel_names_and_the_library_rule_name():
    assert inline.kernel_names(KERNEL) == {"scale_kernel", "copy_kernel"}
    assert _function_name("void copy_kernel<float, 128>(float const*, float*, long)") == "copy_kernel"
    assert _function_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)") \
        == "vectorized_elementwise_kernel"
    # a candidate kernel called "gemm" must not excuse cuBLAS's: only its exact name counts
    assert _function_name("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1") != "gemm"


def _corpus_inline():
    return [p for p in sorted((CORPUS / "honest_gpu").glob("*")) if p.suffix in (".py", ".md")
            and re.search(r"^# format: load_inline\b", p.read_text(), re.M)]


@pytest.mark.parametrize("path", _corpus_inline(), ids=lambda p: p.name)
def test_every_honest_load_inline_wrapper_runs_in_the_interpreter(path: Path, monkeypatch):
    """A dry run on the CPU: the fast path takes each honest candidate (there is no other), and its host code
    allocates outputs of the reference's shapes and dtypes and launches at least one kernel."""
    from conftest import problem_for, read_expectation
    import torch.utils.cpp_extension as cpp
    launches = []

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
    for k, v in (p.get("GPU_SIZES") or {}).items():   # the GPU's sizes and dtypes: kernels check them
        p[k] = v
    c = {"__name__": "candidate"}
    exec(compile(Candidate(exp["source"]).source, path.name, "exec"), c)
    cls = c.get("ModelNew") or c["Model"]
    torch.manual_seed(0)
    model = cls(*p["get_init_inputs"]())
    with torch.device("meta"):   # the reference's output shapes, computing nothing
        ref = p["Model"](*p["get_init_inputs"]())
        meta = p["get_inputs"]()
    xs = [torch.empty_like(x, device="cpu") if isinstance(x, torch.Tensor) else x for x in meta]
    with torch.no_grad():
        out, want = model(*xs), ref(*meta)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    wants = list(want) if isinstance(want, (list, tuple)) else [want]
    assert launches, "no kernel launched"
    assert [(tuple(o.shape), o.dtype) for o in outs] == [(tuple(w.shape), w.dtype) for w in wants]


def test_the_judge_gives_a_wrong_pointer_type_compile_error_on_any_backend(cpu_judge):
    """A KernelBench answer passing double* to a float* kernel: nvcc would not build it, so the cpu backend
    can say so (compile_error, with the message) instead of 'needs a GPU'."""
    from conftest import problem_for, read_expectation
    exp = read_expectation(CORPUS / "honest_gpu" / "l1_relu_fixture_inline.py")
    bad = exp["source"].replace("x.data_ptr<float>()", "x.data_ptr<double>()")
    assert bad != exp["source"]
    r = cpu_judge.evaluate(problem_for(exp), Candidate(bad))
    assert (r.status, r.category) == ("compile_error", "cuda_compile"), r.reason
    assert 'argument of type "double *" is incompatible with parameter of type "float *"' in r.reason
