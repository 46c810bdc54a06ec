"""Which problems' own code the judge trusts in a worker it keeps (Judge._keep_problems_apart): a problem file's
module-level code and its Model run unguarded in both workers and stay there, so a judge gives both workers fresh
wherever the problem changes, unless both problems are trusted. Trusted: the package's built-ins, read from their
files, and KernelBench's 250 level 1-3 problems, known by the SHA-256 of their text (trusted_problems.txt) after a
read of their code: they import torch, torch.nn, torch.nn.functional, math, itertools, einops, numpy and
collections, and bind constants, classes and functions; nothing at module level or in a Model touches the
process (no seeds, default dtypes, backends, setattr or exec). A file that differs by one byte is a user's file.

    python -m megakernel_gym.rewards.trusted PATH/TO/KernelBench      # the list again, from KernelBench's folder
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from megakernel_gym.rewards.problem import sha256

LIST = Path(__file__).with_name("trusted_problems.txt")
LEVELS = ("level1", "level2", "level3")


def is_builtin(problem) -> bool:
    """The problem is one of the package's own files, unchanged (its code is the package's, trusted): the text of
    curriculum/problems/<name>.py, read from the package's folder (the rewards layer does not import the curriculum)."""
    name = problem.name
    if not name or not all(c.isalnum() or c == "_" for c in name):
        return False
    f = Path(__file__).resolve().parent.parent / "curriculum" / "problems" / f"{name}.py"
    try:
        return f.is_file() and f.read_text(encoding="utf-8") == problem.source
    except (OSError, UnicodeDecodeError):
        return False


@functools.lru_cache(maxsize=1)
def trusted_sha256s() -> frozenset[str]:
    """The SHA-256s of trusted_problems.txt (its first column)."""
    lines = LIST.read_text(encoding="utf-8").splitlines()
    return frozenset(ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("#"))


def is_trusted(problem) -> bool:
    """A built-in, or a problem whose text is one of KernelBench's, byte for byte (under any name or tolerance)."""
    return sha256(problem.source) in trusted_sha256s() or is_builtin(problem)


def kernelbench_list(root: str | Path) -> str:
    """trusted_problems.txt's text for KernelBench's folder `root` (level1/ ... level3/): each file's SHA-256 of its
    text as a problem loader reads it (Path.read_text) and its path under root."""
    root = Path(root)
    rows = [f"{sha256(f.read_text())}  {f.relative_to(root).as_posix()}"
            for lvl in LEVELS for f in sorted((root / lvl).glob("*.py"))]
    if not rows:
        raise SystemExit(f"{root}: no {'/, '.join(LEVELS)}/ problem files; pass KernelBench's folder")
    return ("# KernelBench's level 1-3 problems, whose code the judge trusts in a kept worker (rewards/trusted.py):\n"
            "# SHA-256 of each file's text, its path. Made by python -m megakernel_gym.rewards.trusted KERNELBENCH\n"
            + "\n".join(rows) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.rsplit("\n\n", 1)[-1])
    LIST.write_text(kernelbench_list(sys.argv[1]))
    print(f"wrote {LIST}")
