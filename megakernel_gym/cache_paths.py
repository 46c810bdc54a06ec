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
