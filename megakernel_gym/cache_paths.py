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
    else megakernel-gym under $XDG_RUNTIME_DIR, else run/ in the user's cache dir."""
    root = os.environ.get("MKGYM_RUN_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "megakernel-gym"
    return user_cache_path("MKGYM_RUN_DIR", "run")


def judge_run_dirs() -> list[Path]:
    """Every folder a judge server of this user's may have been started in, whatever the environment of
    the command that started it: this process's own (judge_run_dir), the runtime dir's and the cache's.
    Every judge's workers have all of them covered (isolation.hide_store), so no candidate can find one."""
    out = [judge_run_dir()]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        out.append(Path(xdg) / "megakernel-gym")
    import platformdirs
    out.append(Path(platformdirs.user_cache_dir("megakernel-gym")) / "run")
    return list(dict.fromkeys(out))
