"""The fast CUDA path: NVRTC compile (no GPU needed), signatures, caching, errors."""
import time

import pytest

from megakernel_gym import CudaCompileError, CudaUnavailableError, load_cuda
from megakernel_gym.cuda.nvrtc import compile_cuda, parse_signatures

SRC = r"""
#include <cuda_bf16.h>
// a comment with __global__ void fake(int) in it must not count
extern "C" __global__ void __launch_bounds__(256) scale(const float* __restrict__ x, float* y,
                                                        float a, int n, long long stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i * stride] = a * x[i];
}
extern "C" __global__ void noargs() {}
"""


def test_signatures_parsed_from_source():
    sigs = parse_signatures(SRC)
    assert set(sigs) == {"scale", "noargs"}
    assert [(p.name, p.ctype, p.pointer) for p in sigs["scale"]] == [
        ("x", "float", True), ("y", "float", True), ("a", "float", False), ("n", "int", False),
        ("stride", "long long", False)]
    assert sigs["noargs"] == []


def test_compile_produces_cubin_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("MKGYM_CUDA_CACHE", str(tmp_path))
    src = SRC + "\n// unique " + str(time.time())
    t0 = time.perf_counter()
    cubin = compile_cuda(src, arch="sm_90")
    first = time.perf_counter() - t0
    assert cubin[:4] == b"\x7fELF"  # a real cubin
    assert len(list(tmp_path.glob("*.cubin"))) == 1
    t0 = time.perf_counter()
    assert compile_cuda(src, arch="sm_90") == cubin
    assert time.perf_counter() - t0 < first  # served from the disk cache


def test_disk_cache_is_bounded_and_keeps_what_was_used_last(tmp_path, monkeypatch):
    """Every distinct source (an agent's impl body: a whole megakernel) adds a cubin; past
    MKGYM_CUDA_CACHE_MAX_MB the entries used longest ago go, a cache hit counting as a use (a red team
    grew the cache without bound off the GPU, where no cubin is ever loaded)."""
    import os

    monkeypatch.setenv("MKGYM_CUDA_CACHE", str(tmp_path))
    stamp = time.time()
    srcs = [SRC.replace("a * x[i]", f"a * x[i] + {i}.5f") + f"// {stamp}" for i in range(5)]
    cubins = [compile_cuda(src, arch="sm_90") for src in srcs[:3]]
    assert len(set(cubins)) == 3 and len(list(tmp_path.glob("*.cubin"))) == 3
    old = time.time() - 100
    for f in tmp_path.iterdir():                       # entries 0-2 used long ago ...
        os.utime(f, (old, old))
    assert compile_cuda(srcs[0], arch="sm_90") == cubins[0]    # ... then entry 0 again, from the cache
    one = max(len(c) for c in cubins)
    monkeypatch.setenv("MKGYM_CUDA_CACHE_MAX_MB", str((3 * one + one // 2) / (1 << 20)))   # room for three
    cubins.append(compile_cuda(srcs[3], arch="sm_90"))       # a fourth: the cache is over, 1 and 2 go
    left = {f.read_bytes() for f in tmp_path.glob("*.cubin")}
    assert left == {cubins[0], cubins[3]}
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) <= 3 * one + one // 2
    compile_cuda(srcs[1], arch="sm_90")                # an evicted entry compiles again and is kept again
    assert len(list(tmp_path.glob("*.cubin"))) == 3


def test_compile_error_carries_nvrtc_message_with_line_numbers():
    bad = 'extern "C" __global__ void k(float* y) {\n  y[0] = 1.0f;\n  y[1] = not_declared;\n}\n'
    with pytest.raises(CudaCompileError) as ei:
        load_cuda(bad, name="bad.cu")
    assert "bad.cu(3): error" in ei.value.log
    assert "not_declared" in ei.value.log


def test_launch_without_gpu_is_a_clear_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    mod = load_cuda(SRC)
    assert mod.kernel_names == ["scale", "noargs"]
    with pytest.raises(CudaUnavailableError, match="no CUDA GPU"):
        mod.scale((1,), (32,), (torch.zeros(4), torch.zeros(4), 1.0, 4, 1))


def test_unknown_kernel_name_lists_the_real_ones():
    mod = load_cuda(SRC)
    with pytest.raises(AttributeError, match="scale"):
        mod.get_function("scal")


def test_source_must_be_text():
    with pytest.raises(TypeError):
        load_cuda(b"bytes")


@pytest.mark.gpu
def test_launch_on_torch_tensors_without_copies():
    import torch
    mod = load_cuda(SRC)
    x = torch.randn(1000, device="cuda")
    y = torch.full((1000,), float("nan"), device="cuda")
    mod.scale((4,), (256,), (x, y, 2.5, 1000, 1))
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2.5)
    with pytest.raises(TypeError, match="parameter n"):
        mod.scale((4,), (256,), (x, y, 2.5, x, 1))
