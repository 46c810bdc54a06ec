"""The fast CUDA path: compile CUDA C with NVRTC and launch it on torch tensors.

KernelBench compiles each candidate with `torch.utils.cpp_extension.load_inline`, a full
host-compiler build that takes tens of seconds. NVRTC compiles the device code alone in
tens of milliseconds, which is what lets the judge sit inside an RL loop.

- Compilation always goes through NVRTC (the `cuda-bindings` package), on a machine with or
  without a GPU, so a candidate gets the same compiler messages everywhere.
- Loading and launching use CuPy (`cupy.cuda.function.Module`), on torch's current stream, with torch
  tensors passed by pointer (no copies).
- Compiled cubins are cached in memory and on disk by the SHA-256 of source + options.

Kernel arguments are converted from the kernel's own C signature: a pointer parameter
takes a torch tensor on the GPU, `int` takes a Python int as int32, `float` a float32,
`long long`/`int64_t` an int64 and so on; a mismatch is an error naming the parameter.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megakernel_gym.cache_paths import user_cache_path

__all__ = ["load_cuda", "CudaCompileError", "CudaUnavailableError", "CudaModule", "CudaKernel",
           "compile_cuda", "launch_count"]


class CudaCompileError(RuntimeError):
    """NVRTC rejected the source; `log` holds the compiler's message with line numbers."""

    def __init__(self, log: str, name: str = "kernel.cu"):
        self.log = log
        self.name = name
        super().__init__(f"NVRTC failed to compile {name}:\n{log}")


class CudaUnavailableError(RuntimeError):
    """The source compiled, but there is no CUDA GPU here to launch it on."""


# Launch counter: the judge reads it to prove a candidate's own kernels ran.
_launches = 0
_lock = threading.Lock()


def launch_count() -> int:
    return _launches


def _count_launch() -> None:
    global _launches
    with _lock:
        _launches += 1


_C_TYPES = {
    # C type (normalized) -> numpy scalar type
    "int": np.int32, "int32_t": np.int32, "signed int": np.int32, "unsigned int": np.uint32,
    "unsigned": np.uint32, "uint32_t": np.uint32, "long long": np.int64, "long long int": np.int64,
    "int64_t": np.int64, "long": np.int64, "size_t": np.uint64, "uint64_t": np.uint64,
    "unsigned long long": np.uint64, "short": np.int16, "int16_t": np.int16, "char": np.int8,
    "int8_t": np.int8, "uint8_t": np.uint8, "unsigned char": np.uint8, "bool": np.bool_,
    "float": np.float32, "double": np.float64,
}


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str
    pointer: bool


_KERNEL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                        r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)", re.S)


def _strip_comments(src: str) -> str:
    """Comments out as a compiler takes them: lines spliced first, strings left alone (cuda/source_rules, the one
    reader; a regex of its own here had read `// ... \\` and a comment marker in a string its own way)."""
    from megakernel_gym.cuda.source_rules import splice_lines, strip_comments
    return strip_comments(splice_lines(src))


def parse_signatures(source: str) -> dict[str, list[Param]]:
    """The parameter lists of every `__global__` function, by name."""
    sigs: dict[str, list[Param]] = {}
    for m in _KERNEL_RE.finditer(_strip_comments(source)):
        name, plist = m.group(1), m.group(2).strip()
        params: list[Param] = []
        if plist and plist != "void":
            for i, raw in enumerate(plist.split(",")):
                p = " ".join(raw.replace("__restrict__", " ").replace("__restrict", " ").split())
                pointer = "*" in p
                p = p.replace("*", " ")
                words = [w for w in p.split() if w not in ("const", "volatile")]
                if len(words) >= 2:
                    pname, ctype = words[-1], " ".join(words[:-1])
                else:
                    pname, ctype = f"arg{i}", " ".join(words)
                params.append(Param(pname, ctype, pointer))
        sigs[name] = params
    return sigs


def _nvrtc_check(result, prog=None):
    from cuda.bindings import nvrtc
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {err}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def _default_arch() -> str:
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001 - no torch CUDA: compile for Hopper, the judge's target
        pass
    return "sm_90"


def _cache_dir() -> Path:
    return user_cache_path("MKGYM_CUDA_CACHE", "cubin")


# The disk cache is bounded. An env compiles every distinct `impl` body an agent sends into a whole
# megakernel's cubin (~130 KB for the 1B model's), and off the GPU none is ever loaded: a red team's
# attempts grew it 0.1 -> 0.4 MB in three steps, ~130 GB over a million. Past MKGYM_CUDA_CACHE_MAX_MB
# (default 2,048) the entries used longest ago go (a hit marks its entry used), down to 3/4 of it.
CACHE_MAX_MB = 2048.0


def _cache_max_bytes() -> int:
    try:
        mb = float(os.environ.get("MKGYM_CUDA_CACHE_MAX_MB", CACHE_MAX_MB))
    except ValueError:
        mb = CACHE_MAX_MB
    return int(max(mb, 0.0) * (1 << 20))


def _prune_cache(folder: Path, limit: int) -> None:
    """Remove the cache's least recently used entries (a cubin and its names file together) until what
    is left takes at most 3/4 of `limit` bytes, where it takes more than `limit`."""
    entries: dict[str, list] = {}
    try:
        for f in os.scandir(folder):
            if f.is_file() and f.name.endswith((".cubin", ".names.json")):
                st = f.stat()
                e = entries.setdefault(f.name.split(".", 1)[0], [0.0, 0, []])
                e[0], e[1] = max(e[0], st.st_mtime), e[1] + st.st_size
                e[2].append(f.path)
    except OSError:
        return
    total = sum(e[1] for e in entries.values())
    if total <= limit:
        return
    for _, size, paths in sorted(entries.values(), key=lambda e: e[0]):
        if total <= limit * 3 // 4:
            break
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass
        total -= size


def _nvrtc_include_dirs() -> list[str]:
    """Headers shipped with the nvidia-cuda-nvrtc / cuda toolkit wheels (cuda_fp16.h etc.)."""
    dirs = []
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        for base in nvidia.__path__:
            for sub in ("cuda_nvrtc/include", "cuda_runtime/include", "cu13/include", "cuda_cccl/include"):
                d = Path(base) / sub
                if d.is_dir():
                    dirs.append(str(d))
    except ImportError:
        pass
    for d in ("/usr/local/cuda/include",):
        if os.path.isdir(d):
            dirs.append(d)
    return dirs


# agent code (a megakernel with `impl` bodies) compiles in a process of its own under this limit: NVRTC
# runs in-process otherwise, where a source that takes it minutes, or crashes it, would take the env
# (or the GPU judge's worker) with it. Within the impl size caps (compiler/impl_guard.py) the slowest
# compile measured took 21 s on a busy 2-core host (bench/results/impl_compile_cost.json: two 20k-character
# bodies of straight-line arithmetic), an honest body about 1 s; this bounds what they do not foresee.
IMPL_COMPILE_TIMEOUT_S = 60.0
COMPILE_MEMORY_BYTES = 16 << 30      # the compile process's address space


def compile_cuda(source: str, name: str = "kernel.cu", options: tuple[str, ...] = (),
                 arch: str | None = None, *, host_includes: bool = True, timeout_s: float | None = None) -> bytes:
    """Compile CUDA C to a cubin with NVRTC. Raises CudaCompileError with the compiler log.
    host_includes=False: no include path at all (for sources that include nothing, such as the
    megakernel, and any that hold agent code); timeout_s: compile in a process of its own, stopped
    after that long (a CudaCompileError of category compile_timeout)."""
    return compile_program(source, name, options, arch, host_includes=host_includes, timeout_s=timeout_s)[0]


def compile_program(source: str, name: str = "kernel.cu", options: tuple[str, ...] = (),
                    arch: str | None = None, headers: dict[str, str] | None = None,
                    name_expressions: tuple[str, ...] = (), *, host_includes: bool = True,
                    timeout_s: float | None = None) -> tuple[bytes, dict[str, str]]:
    """NVRTC with in-memory headers (`#include <name>` resolves to the text given) and name
    expressions (`kern<float>`, a C++ kernel's unmangled name): the cubin and each name
    expression's lowered (mangled) symbol. Cached on disk like compile_cuda. host_includes=False
    gives NVRTC no -I directory and not the source's own (--no-source-include); timeout_s runs the
    compile in a child process (cuda/nvrtc_child.py) under that wall-clock limit."""
    import json

    arch = arch or _default_arch()
    headers = dict(headers or {})
    names = tuple(dict.fromkeys(name_expressions))
    opts = [f"--gpu-architecture={arch}", "-std=c++17", *options]
    opts += [f"-I{d}" for d in _nvrtc_include_dirs()] if host_includes else ["--no-source-include"]
    parts = [source, name, *opts, "\1headers", *(f"{k}\0{v}" for k, v in sorted(headers.items())), "\1names", *names]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    cache = _cache_dir() / f"{key}.cubin"
    side = cache.with_suffix(".names.json")
    if cache.exists() and (not names or side.exists()):
        try:
            lowered = json.loads(side.read_text()) if names else {}
            cubin = cache.read_bytes()
        except (OSError, ValueError):
            pass  # a damaged cache entry only costs a recompile
        else:
            try:
                os.utime(cache)     # used now: the last entry _prune_cache removes
            except OSError:
                pass                # a read-only cache dir: still a hit
            return cubin, lowered

    from megakernel_gym.cuda.nvrtc_child import NvrtcFailed, nvrtc_compile
    if timeout_s is not None:
        cubin, lowered = _compile_in_child(source, name, opts, headers, names, timeout_s)
    else:
        try:
            cubin, lowered = nvrtc_compile(source, name, opts, headers, names)
        except NvrtcFailed as e:
            raise CudaCompileError(e.args[0], name) from None
    if not cubin:       # a virtual arch's compile (PTX, for its errors only: env's impl feedback) keeps nothing
        return cubin, lowered
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        if names:
            _atomic_write(side, json.dumps(lowered).encode())
        _atomic_write(cache, cubin)
        _prune_cache(cache.parent, _cache_max_bytes())
    except OSError:
        pass  # a read-only cache dir only costs a recompile
    return cubin, lowered


def _compile_in_child(source: str, name: str, opts: list[str], headers: dict[str, str], names: tuple[str, ...],
                      timeout_s: float) -> tuple[bytes, dict[str, str]]:
    """nvrtc_child.nvrtc_compile in a process of its own, killed after timeout_s. What comes back is
    JSON, checked for shape: a compromised compiler could say anything, but not run code here."""
    import base64
    import json
    import subprocess
    import sys

    child = Path(__file__).with_name("nvrtc_child.py")
    job = json.dumps({"source": source, "name": name, "opts": opts, "headers": headers, "names": list(names),
                      "cpu_s": int(timeout_s) + 5, "memory_bytes": COMPILE_MEMORY_BYTES})
    try:
        r = subprocess.run([sys.executable, str(child)], input=job.encode(), capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        err = CudaCompileError(f"NVRTC ran past {timeout_s:.0f} s on this source and was stopped (the compile of "
                               "agent code has a time limit); make the code smaller or simpler", name)
        err.category = "compile_timeout"
        raise err from None
    try:
        answer = json.loads(r.stdout)
        ok = answer["ok"] is True
        if ok:
            cubin = base64.b64decode(answer["cubin"], validate=True)
            lowered = {str(k): str(v) for k, v in dict(answer["lowered"]).items()}
        else:
            log = str(answer["log"])
    except (ValueError, KeyError, TypeError):
        err = CudaCompileError(f"NVRTC's compile process ended without an answer (exit code {r.returncode}"
                               f"{', a signal' if r.returncode < 0 else ''}); the source may be too large or too "
                               "deep for the compiler", name)
        err.category = "compile_crash"
        raise err from None
    if not ok:
        raise CudaCompileError(log, name)
    return cubin, lowered


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # atomic: concurrent workers never read half a file


class CudaKernel:
    """One `__global__` function, callable as `kernel(grid, block, args, shared_mem=0)`."""

    def __init__(self, module: "CudaModule", name: str, params: list[Param]):
        self.module, self.name, self.params = module, name, params
        self._fn = None

    def _convert(self, args) -> tuple:
        import torch
        if len(args) != len(self.params):
            raise TypeError(f"kernel {self.name} takes {len(self.params)} arguments "
                            f"({', '.join(p.name for p in self.params)}), got {len(args)}")
        out = []
        for p, a in zip(self.params, args):
            if p.pointer:
                if isinstance(a, torch.Tensor):
                    if not a.is_cuda:
                        raise TypeError(f"kernel {self.name}: parameter {p.name} ({p.ctype}*) needs a "
                                        f"CUDA tensor, got one on {a.device}")
                    out.append(np.uint64(a.data_ptr()))
                elif isinstance(a, int):
                    out.append(np.uint64(a))
                else:
                    raise TypeError(f"kernel {self.name}: parameter {p.name} ({p.ctype}*) needs a "
                                    f"torch tensor, got {type(a).__name__}")
            else:
                npt = _C_TYPES.get(p.ctype)
                if npt is None:
                    raise TypeError(f"kernel {self.name}: parameter {p.name} has type {p.ctype!r}, "
                                    "which the loader cannot pass; use a scalar C type or a pointer")
                if isinstance(a, torch.Tensor):
                    raise TypeError(f"kernel {self.name}: parameter {p.name} ({p.ctype}) is a scalar, "
                                    "got a tensor (declare it as a pointer?)")
                out.append(npt(a))
        return tuple(out)

    def __call__(self, grid, block, args, shared_mem: int = 0):
        fn = self.module._function(self.name)  # no GPU here: CudaUnavailableError before anything else
        args = self._convert(args)
        import torch
        stream = self.module._stream(torch.cuda.current_stream().cuda_stream)
        grid = (tuple(int(g) for g in grid) if isinstance(grid, (tuple, list)) else (int(grid),)) + (1, 1)
        block = (tuple(int(b) for b in block) if isinstance(block, (tuple, list)) else (int(block),)) + (1, 1)
        fn(grid[:3], block[:3], args, shared_mem=shared_mem, stream=stream)
        _count_launch()


class CudaModule:
    """A compiled CUDA C source. Attribute access returns its kernels by name."""

    def __init__(self, source: str, name: str, cubin: bytes):
        self.source, self.name, self.cubin = source, name, cubin
        self.signatures = parse_signatures(source)
        self._raw = None
        self._fns: dict = {}
        self._streams: dict = {}

    @property
    def kernel_names(self) -> list[str]:
        return list(self.signatures)

    def get_function(self, name: str) -> CudaKernel:
        if name not in self.signatures:
            raise AttributeError(f"{self.name} has no __global__ function {name!r}; it has: "
                                 f"{', '.join(self.signatures) or 'none'} (declare kernels extern \"C\")")
        return CudaKernel(self, name, self.signatures[name])

    def __getattr__(self, name: str) -> CudaKernel:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get_function(name)

    def _load(self):
        if self._raw is None:
            try:
                import torch
                if not torch.cuda.is_available():
                    raise CudaUnavailableError(
                        f"{self.name} compiled with NVRTC, but there is no CUDA GPU here to run it on")
                import cupy
            except ImportError as e:
                raise CudaUnavailableError(f"{self.name} compiled, but CuPy is missing to launch it "
                                           f"({e}); pip install cupy-cuda13x") from e
            # cuModuleLoadData on the cubin bytes (CuPy's low-level Module): no file, no recompile.
            self._raw = cupy.cuda.function.Module()
            self._raw.load(self.cubin)
        return self._raw

    def _function(self, name: str):
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = self._load().get_function(name)
        return fn

    def read_global(self, name: str, words: int) -> np.ndarray:
        """The first `words` 64-bit words of the `__device__` variable `name` (after the stream's work)."""
        import cupy
        ptr = self._load().get_global_var(name)      # cuModuleGetGlobal: the variable's device address
        out = np.zeros(words, dtype=np.uint64)
        cupy.cuda.runtime.memcpy(out.ctypes.data, ptr, 8 * words, cupy.cuda.runtime.memcpyDeviceToHost)
        return out

    def write_global_zero(self, name: str, words: int) -> None:
        import cupy
        cupy.cuda.runtime.memset(self._load().get_global_var(name), 0, 8 * words)

    def set_max_dynamic_smem(self, name: str, nbytes: int) -> None:
        """Let kernel `name` launch with more than 48 KB of dynamic shared memory (a kernel must ask)."""
        from cupy.cuda import driver
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
        driver.funcSetAttribute(self._function(name).ptr, attr, int(nbytes))

    def _stream(self, ptr: int):
        s = self._streams.get(ptr)
        if s is None:
            import cupy
            # the legacy default stream is CuPy's null stream; any other is torch's, by pointer
            s = self._streams[ptr] = cupy.cuda.Stream.null if ptr == 0 else cupy.cuda.ExternalStream(ptr)
        return s


_modules: dict[str, CudaModule] = {}


def load_cuda(source: str, name: str = "kernel.cu", options: tuple[str, ...] | list[str] = (),
              arch: str | None = None, *, host_includes: bool = True, timeout_s: float | None = None) -> CudaModule:
    """Compile `source` with NVRTC (cached by source hash) and return its kernels.

    Kernels must be `extern "C" __global__` so their names survive. Launch with
    `mod.my_kernel(grid, block, (tensor, n, ...))` on torch's current stream. host_includes and
    timeout_s: as compile_cuda's.
    """
    if not isinstance(source, str):
        raise TypeError("load_cuda(source): source must be CUDA C text (str)")
    options = tuple(options)
    if host_includes:
        # the include path is there: what the source or its options may read through it is checked first (red team
        # 16 stringized an #include "/etc/passwd" into a static_assert, and the compile error carried the file back)
        from megakernel_gym.cuda.source_rules import SourceRefused, check_cuda_source
        try:
            check_cuda_source(source, options)
        except SourceRefused as e:
            raise CudaCompileError(str(e), name) from None
    key = hashlib.sha256("\0".join([source, name, arch or "", *options, str(host_includes)]).encode()).hexdigest()
    mod = _modules.get(key)
    if mod is None:
        cubin = compile_cuda(source, name, options, arch, host_includes=host_includes, timeout_s=timeout_s)
        mod = _modules[key] = CudaModule(source, name, cubin)
    return mod
