"""The load_inline interpreter against nvcc and g++ (tests/corpus/inline_diff/*.cu).

Each case is a small host source defining `f(torch::Tensor x)` (x of the case's shape, default 3 x 5)
that returns a scalar, with the verdict the real build gives it in its header:

    // verdict: value V          nvcc (or g++) compiles it and f(x) returns V
    // verdict: error MESSAGE    the compiler refuses it, saying MESSAGE
    // verdict: refused WHAT     the compiler builds it, the interpreter refuses it (WHAT in its message):
                                 state across calls, calls outside its allowlist, undefined behaviour
    // file: cpp                 the source is a cpp_sources file, built by g++ (default: cuda_sources, nvcc)
    // headers: torch            compile against torch's own headers (default: the stand-in in stub/)
    // native: V                 (refused cases) what the native build returns
    // fast: refused WHAT        (error cases) the interpreter refuses it before it reaches the error

The CPU test holds the interpreter to every recorded verdict: the same value, the compiler's error in
the compiler's words (a BuildError) or a refusal naming the construct (Unsupported). The second test,
run where nvcc is on PATH, recompiles and runs every case natively, so the recorded verdicts cannot rot
(`python tests/test_inline_diff.py` prints each case's native verdict, for recording a new one).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import CORPUS
from megakernel_gym.rewards import inline

DIFF = CORPUS / "inline_diff"
CASES = sorted(DIFF.glob("*.cu"))
NOOP_KERNEL = "__global__ void mkgym_noop() {}\n"


@dataclass
class Case:
    name: str
    source: str
    verdict: str          # value | error | refused
    detail: str
    file: str = "cuda"
    headers: str = "stub"
    shape: tuple = (3, 5)
    native: str | None = None
    fast: str | None = None


def read_case(path: Path) -> Case:
    text = path.read_text()
    head = dict(re.findall(r"^// (\w+): (.*)$", text, re.M))
    verdict, _, detail = head["verdict"].partition(" ")
    return Case(path.stem, text, verdict, detail, head.get("file", "cuda"), head.get("headers", "stub"),
                tuple(int(v) for v in head.get("shape", "3 5").split()), head.get("native"), head.get("fast"))


def parse_value(text: str):
    if text in ("true", "false"):
        return text == "true"
    if re.search(r"[.e]|inf|nan", text):
        return float(text)
    return int(text)


def interpret(case: Case) -> tuple[str, object]:
    """('value', what f returned) | ('error', BuildError text) | ('refused', Unsupported text)."""
    cpp, cuda = (case.source, NOOP_KERNEL) if case.file == "cpp" else ("", case.source)
    try:
        mod = inline.translate(f"diff_{case.name}", cpp, cuda, ["f"], gpu=False)
        mod._functions["f"].program.launcher = lambda *a: None
        return "value", mod.f(torch.empty(case.shape))
    except inline.Unsupported as e:
        return "refused", str(e)
    except inline.BuildError as e:
        return "error", str(e)


def test_the_corpus_is_large_and_covers_each_verdict():
    cases = [read_case(p) for p in CASES]
    assert len(cases) >= 30
    kinds = {c.verdict for c in cases}
    assert kinds == {"value", "error", "refused"}, kinds
    assert {c.file for c in cases} == {"cuda", "cpp"}
    for c in cases:
        assert re.search(r"\bf\s*\(torch::Tensor x\)", c.source), c.name
        if c.verdict == "value":
            parse_value(c.detail)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_interpreter_gives_the_recorded_verdict(path: Path):
    case = read_case(path)
    kind, got = interpret(case)
    if case.verdict == "value":
        want = parse_value(case.detail)
        assert kind == "value", got
        assert type(got) is type(want) and got == want, (got, want)
    elif case.verdict == "error" and not case.fast:
        assert kind == "error", (kind, got)     # nvcc's (or g++'s) error, in its words
        assert case.detail in got, got
    else:
        want = case.fast.partition(" ")[2] if case.fast else case.detail
        assert kind == "refused", (kind, got)
        assert want in got and inline.SUPPORTED_HOST_SUBSET in got, got


# -- the native build ------------------------------------------------------------------------------

DRIVER = r"""
#include <cstdio>
#include <type_traits>
int main() {
    torch::Tensor x;
    x.shape_ = {SHAPE};
    auto r = f(x);
    if constexpr (std::is_same_v<decltype(r), bool>) std::printf("%s\n", r ? "true" : "false");
    else if constexpr (std::is_floating_point_v<decltype(r)>) std::printf("%.17g\n", (double)r);
    else if constexpr (std::is_signed_v<decltype(r)>) std::printf("%lld\n", (long long)r);
    else std::printf("%llu\n", (unsigned long long)r);
    return 0;
}
"""


def native(case: Case, work: Path) -> tuple[str, str]:
    """('value', what the native f printed) | ('error', the compiler's output) | ('built', '') where only
    compiling is possible (torch's headers: linking libtorch is not this test's business)."""
    import torch.utils.cpp_extension as cpp_ext
    src = work / f"{case.name}.{'cpp' if case.file == 'cpp' else 'cu'}"
    exe = work / case.name
    if case.headers == "torch":
        import sysconfig
        includes = [f"-I{p}" for p in cpp_ext.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
        src.write_text(case.source)
        link = ["-c", "-o", str(exe) + ".o"]
    else:
        includes = [f"-I{DIFF / 'stub'}"]
        src.write_text(case.source + DRIVER.replace("SHAPE", ", ".join(map(str, case.shape))))
        link = ["-o", str(exe)]
    if case.file == "cpp":
        cmd = ["g++", "-std=c++20", "-fPIC", *includes, str(src), *link]
    else:
        cmd = ["nvcc", "-std=c++20", *cpp_ext.COMMON_NVCC_FLAGS, *includes, str(src), *link]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if build.returncode != 0:
        return "error", build.stdout + build.stderr
    if case.headers == "torch":
        return "built", ""
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (case.name, run.stderr)
    return "value", run.stdout.strip()


def _toolchain() -> str:
    """What the native verdicts depend on besides a case's text: the compilers' and torch's versions."""
    out = [torch.__version__]
    for tool in ("nvcc", "g++"):
        out.append(subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip())
    return "\n".join(out)


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("g++") is None, reason="needs nvcc and g++")
@pytest.mark.skipif(os.environ.get("MKGYM_NVCC_DIFF") != "1",
                    reason="3-4 min of native builds on a fresh clone: run with MKGYM_NVCC_DIFF=1 after changing "
                           "the corpus or the toolchain (the interpreter is checked against the recorded verdicts "
                           "on every run)")
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_recorded_verdict_is_what_nvcc_and_gxx_give(path: Path, tmp_path, request):
    """The case compiled (and run, where the stand-in header serves) natively: the recorded verdict is the
    compiler's. About two seconds a case (torch's headers: half a minute); a verdict is kept in pytest's
    cache under the case's text and the compilers' versions, so only what changed is rebuilt."""
    case = read_case(path)
    key = "inline_diff/" + hashlib.sha256((case.source + _toolchain()).encode()).hexdigest()[:32]
    got = request.config.cache.get(key, None)
    if got is None:
        got = list(native(case, tmp_path))
        request.config.cache.set(key, got)
    kind, out = got
    if case.verdict == "value":
        assert kind == "value", out[-2000:]
        assert parse_value(out) == parse_value(case.detail) and \
            type(parse_value(out)) is type(parse_value(case.detail)), out
    elif case.verdict == "error":
        assert kind == "error" and case.detail in out, out[-2000:]
    else:   # refused: the native build takes it (which is why the interpreter must say no)
        assert kind in ("value", "built"), out[-2000:]
        if case.native is not None:
            assert parse_value(out) == parse_value(case.native), out


if __name__ == "__main__":   # python tests/test_inline_diff.py: each case's native verdict, for recording
    sys.path.insert(0, str(Path(__file__).parent))
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for p in CASES:
            c = read_case(p)
            kind, out = native(c, Path(d))
            print(f"{c.name}: {kind} {out.strip().splitlines()[0] if kind == 'value' else ''}"
                  f"{'' if kind != 'error' else [ln for ln in out.splitlines() if 'error' in ln][:1]}")
