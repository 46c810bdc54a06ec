"""The judge reads a load_inline or load_cuda source as a compiler does, or refuses it (red team 16). Each escape
below scored a program other than the one C++ builds, or read host values or host files, and each has an honest
neighbour that must still build: the interpreter's dry run on the CPU (launches recorded), NVRTC compiling the
device code here without a GPU."""
from __future__ import annotations

import time

import pytest
import torch

from megakernel_gym.cuda import nvrtc
from megakernel_gym.rewards import anticheat, inline

KERNELS = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
__global__ void zero_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}
"""
DECL = "torch::Tensor f(torch::Tensor x);"


def build(cuda: str, cpp: str = DECL, name: str = "t"):
    launches: list = []
    mod = inline.load_inline(name, cpp, cuda, functions=["f"], gpu=False)
    for fn in mod._functions.values():
        fn.program.launcher = lambda *a: launches.append(a[0])     # (the kernel's name)
    return mod, launches


def test_lines_are_spliced_before_comments_as_in_cpp():
    """`// ... \\` runs the comment over the next line and `/* ... *\\` + newline + `/` closes one: the judge had
    read both the other way, so its interpreter launched copy_kernel where C++ launches zero_kernel."""
    cuda = KERNELS + r"""
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    /* one thread per element *\
/ zero_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n);
    // the launch: \
    copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
    mod, launches = build(cuda, name="splice")
    mod.f(torch.ones(8))
    assert launches == ["zero_kernel"], launches
    # the honest use of a continuation: a macro over several lines
    honest = KERNELS + r"""
#define LAUNCH_COPY(x, out, n) \
    copy_kernel<<<((n) + 255) / 256, 256>>>((x).data_ptr<float>(), (out).data_ptr<float>(), (n))
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    LAUNCH_COPY(x, out, (int)x.numel());
    return out;
}
"""
    mod, launches = build(honest, name="splice_honest")
    mod.f(torch.ones(8))
    assert len(launches) == 1


@pytest.mark.parametrize("line", ['#include "/etc/passwd"', "#include </etc/passwd>", "#include <../../etc/passwd>",
                                  '#define P "/etc/passwd"\n#include P', "%:include \"/etc/passwd\"",
                                  '_Pragma("message(\\"x\\")")', '#line 1 "/etc/passwd"'])
def test_no_source_reads_a_host_file_or_reaches_the_preprocessor_around_the_judge(line):
    """A stringized `#include "/etc/passwd"` in a static_assert came back whole in the compile error: an include
    names a header by its plain name only, and digraphs, _Pragma and #line are refused, before NVRTC reads
    anything; load_cuda takes the same rules, and no option that names a path."""
    cuda = KERNELS + "#define STR(...) #__VA_ARGS__\nstatic_assert(0, STR(\n" + line + "\n));\n" + \
        "torch::Tensor f(torch::Tensor x) { copy_kernel<<<1, 1>>>(x.data_ptr<float>(), x.data_ptr<float>(), 1); return x; }\n"
    with pytest.raises(inline.Unsupported) as e:
        build(cuda, name="include_leak")
    assert "root:" not in str(e.value)
    with pytest.raises(nvrtc.CudaCompileError) as e:
        nvrtc.load_cuda('extern "C" __global__ void k(float* y) { }\n#define STR(...) #__VA_ARGS__\n'
                        "static_assert(0, STR(\n" + line + "\n));\n")
    assert "root:" not in str(e.value)


def test_load_cuda_takes_code_generation_options_and_header_names_only():
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'
    for opts in (("-I/",), ("--include-path=/etc",), ("-include", "/etc/passwd"), ("--pre-include=/etc/passwd",)):
        with pytest.raises(nvrtc.CudaCompileError, match="not paths"):
            nvrtc.load_cuda(src, options=opts)
    assert nvrtc.compile_cuda(src, options=("--use_fast_math", "-DBLOCK=256", "-lineinfo"))   # honest: compiles


def test_a_vector_parameter_takes_numbers_not_a_tensors_values():
    """`f(x, x.reshape(-1))` into a `std::vector<double>` read every element on the host (one item() each): red team
    16 computed softmax there and wrote it back with fill_. Numbers from Python still bind."""
    cuda = KERNELS + r"""
torch::Tensor f(torch::Tensor x, std::vector<double> v) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    if (v[0] > 0.5) copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    else zero_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n);
    return out;
}
"""
    launches: list = []
    mod = inline.load_inline("vec", "torch::Tensor f(torch::Tensor x, std::vector<double> v);", cuda,
                             functions=["f"], gpu=False)
    mod._functions["f"].program.launcher = lambda *a: launches.append(a[0])
    x = torch.ones(8)
    with pytest.raises(inline.Unsupported, match="list of Python numbers"):
        mod.f(x, x.reshape(-1))
    with pytest.raises(inline.Unsupported):
        mod.f(x, [x[0], x[1]])
    mod.f(x, [1.0, 2.0])
    assert len(launches) == 1


@pytest.mark.parametrize("text", ["std::to_string(a.begin())", "std::to_string(torch::TensorOptions().dtype(x))"])
def test_nothing_that_holds_a_tensor_is_written_out_as_text(text):
    """Red team 11's rule refused std::to_string(x); an iterator over a vector holding x, or TensorOptions whose
    dtype was x, printed its values too. Text is made of numbers, strings, dtypes and devices only."""
    cuda = KERNELS + r"""
torch::Tensor f(torch::Tensor x) {
    auto out = torch::zeros_like(x);
    int n = x.numel();
    std::vector<torch::Tensor> a = {x};
    std::string s = TEXT;
    std::string t = std::to_string(x.size(0));
    TORCH_CHECK(n > 0, "elements: ", t, " dtype ", x.scalar_type());
    if (s == t) zero_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n);
    return out;
}
""".replace("TEXT", text)
    mod, _ = build(cuda, name="text")
    with pytest.raises(inline.Unsupported, match="as text|TensorOptions dtype"):
        mod.f(torch.ones(8))
    honest = cuda.replace(text, "std::to_string(n)")
    mod, launches = build(honest, name="text_honest")
    mod.f(torch.ones(8))
    assert len(launches) == 1


def test_a_macro_acts_only_below_its_define_in_its_own_source():
    """The judge applied every #define of both sources to every host function: `#define MODE 1` in cpp_sources (its
    own translation unit in torch's build) and `#define LATE 1000` below the function turned the judge's branch to
    copy_kernel, where C++ (MODE and LATE the consts above) launches zero_kernel."""
    cuda = KERNELS + r"""
const int MODE = 0;
const int LATE = 1;
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    if (MODE == 1 && LATE == 1000)
        copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    else
        zero_kernel<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n);
    return out;
}
#define LATE 1000
"""
    mod, launches = build(cuda, cpp="#define MODE 1\n" + DECL, name="macro_scope")
    mod.f(torch.ones(8))
    assert launches == ["zero_kernel"], launches
    above = KERNELS + "#define GRID(n) (((n) + 255) / 256)\n" + r"""
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    copy_kernel<<<GRID(n), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
    mod, launches = build(above, name="macro_above")
    mod.f(torch.ones(8))
    assert len(launches) == 1


def test_macros_that_expand_past_a_bound_are_refused_quickly():
    depth = 6     # 10^6 tokens: 12 s and 400 MB of the worker before the bound
    defs = "\n".join(f"#define M{i} " + " ".join([f"M{i + 1}"] * 10) for i in range(depth)) + f"\n#define M{depth} 1,\n"
    cuda = KERNELS + defs + r"""
torch::Tensor f(torch::Tensor x) { std::vector<int> a = {M0 1}; copy_kernel<<<1, 1>>>(x.data_ptr<float>(), x.data_ptr<float>(), 1); return x; }
"""
    t = time.perf_counter()
    with pytest.raises(inline.Unsupported, match="expand to more than"):
        build(cuda, name="bomb")
    assert time.perf_counter() - t < 5


def test_a_coding_line_after_a_unicode_line_separator_is_read_as_pythons_tokenizer_reads_it():
    """str.splitlines() splits at U+2028, Python's tokenizer (and linecache, which Triton reads kernels through) does
    not: a declaration after one on the first line was read by the reader and not by the rule."""
    src = "# a\u2028# b\u2028# coding: raw_unicode_escape\nx = 1\n"
    assert [f.rule for f in anticheat.encoding_flags(src)] == ["source_encoding"]
    assert anticheat.encoding_flags("# a\u2028note\n# coding: utf-8\nx = 1\n") == []
