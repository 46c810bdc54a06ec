"""The judge's identity in the results store (red team 20): a verdict is served from the store, exported or
counted only under the judge that made it. An older judge's `correct` for a candidate a later fix refuses (a hole
since closed) would otherwise be a reward, and an exported kernel, forever: the store keyed verdicts by problem,
candidate and device alone. The identity is a hash of the judge's own code (this package's rewards/ and cuda/,
every file) and of the code the built-in problems' references and the level-5 judge run (compiler/, which also
holds the sim's cost model, and curriculum/numerics.py), so any change to a rule, a check, a worker or a
reference is a new judge. A judge built with settings other than the defaults says so after it: the test-only
ones (no static checks, no Python guard, torch's own load_inline, privileges kept) and those a user may choose
(the worker recycle policy, the timing's stop rule), since each changes what a verdict or a time means.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
JUDGE_CODE = ("rewards", "cuda", "compiler", "curriculum/numerics.py")   # folders and files under the package


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 (first 16 hex digits) of every file under the judge's folders, by path and content, and the
    installed torch, Triton and numpy versions."""
    h = hashlib.sha256()
    for part in JUDGE_CODE:
        root = _PACKAGE / part
        for f in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
                h.update(f.relative_to(_PACKAGE).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    # and the libraries that run what the judge reads: a verdict of another torch, Triton or numpy is another
    # judge's (red team 24); their installed versions, read without importing them
    from importlib import metadata
    for lib in ("torch", "triton", "numpy"):
        try:
            h.update(f"{lib}=={metadata.version(lib)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib} absent\0".encode())
    return h.hexdigest()[:16]


def judge_version(static_checks: bool = True, python_guard: bool = True, fast_inline: bool = True,
                  drop_privileges: bool = True, recycle: str = "failure", timing: dict | None = None,
                  timeout_s: float | None = None, compile_timeout_s: float | None = None) -> str:
    """This judge's identity: its code's hash, and each setting it was built with that is not the default
    (timeout_s, compile_timeout_s: None where the backend's default; red team 22: a `correct` made under a long
    --timeout was served to a default judge, which would have timed the kernel out)."""
    off = [name for name, on in (("no-static-checks", static_checks), ("no-python-guard", python_guard),
                                 ("torch-load-inline", fast_inline), ("privileges-kept", drop_privileges)) if not on]
    if recycle != "failure":
        off.append(f"recycle-{recycle}")
    if timing:                       # the stop rule where it is not the judge's default (judge.version_of)
        off.append("timing-" + hashlib.sha256(json.dumps(timing, sort_keys=True, default=str).encode()).hexdigest()[:8])
    off += [f"{name}-{float(v):g}s" for name, v in (("timeout", timeout_s), ("compile-timeout", compile_timeout_s))
            if v is not None]
    return "+".join([code_hash(), *off])
