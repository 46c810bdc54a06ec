"""Where megakernel-gym keeps what it writes for later: a path an environment variable names, else
one in the user's cache dir (platformdirs), shared by the compiler's captured graphs, the judge's
compiled kernels and its results store."""
from __future__ import annotations

import os
from pathlib import Path


def user_cache_path(env_var: str, name: str) -> Path:
    """$env_var if it is set, else `name` under the user's cache dir for megakernel-gym."""
    root = os.environ.get(env_var)
    if root:
        return Path(root)
    import platformdirs
    return Path(platformdirs.user_cache_dir("megakernel-gym")) / name


def judge_run_dir() -> Path:
    """Where `mkgym judge`'s judge servers keep their sockets (rewards/judge_server.py): $MKGYM_RUN_DIR,
    else megakernel-gym under $XDG_RUNTIME_DIR, else run/ in the user's cache dir. Every judge's workers
    have it covered (isolation.hide_store), so no candidate can hand a server work."""
    root = os.environ.get("MKGYM_RUN_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "megakernel-gym"
    return user_cache_path("MKGYM_RUN_DIR", "run")
