"""The judge's identity in the results store (red team 20): a verdict is served from the store, exported or
counted only under the judge that made it. An older judge's `correct` for a candidate a later fix refuses (a hole
since closed) would otherwise be a reward, and an exported kernel, forever: the store keyed verdicts by problem,
candidate and device alone. The identity is a hash of the judge's own code (this package's rewards/ and cuda/,
every file), so any change to a rule, a check or a worker is a new judge; a judge built with a test-only setting
(no static checks, no Python guard, torch's own load_inline) says so after it.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
JUDGE_CODE = ("rewards", "cuda")


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 (first 16 hex digits) of every file under the judge's folders, by path and content."""
    h = hashlib.sha256()
    for folder in JUDGE_CODE:
        for f in sorted((_PACKAGE / folder).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
                h.update(f.relative_to(_PACKAGE).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def judge_version(static_checks: bool = True, python_guard: bool = True, fast_inline: bool = True) -> str:
    """This judge's identity: its code's hash, and the test-only settings it was built with, if any."""
    off = [name for name, on in (("no-static-checks", static_checks), ("no-python-guard", python_guard),
                                 ("torch-load-inline", fast_inline)) if not on]
    return "+".join([code_hash(), *off])
