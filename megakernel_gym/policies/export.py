"""`mkgym export`: ship the best correct kernel per problem from the results store.

    summary = export_kernels("kernels/")           # the default store (MKGYM_STORE or the user cache)
    Model = load_kernel("kernels/softmax")         # ModelNew, a drop-in nn.Module for the problem's Model

Layout: one folder per problem with `kernel.py` (the candidate's source, as judged), `result.json`
(its EvalResult) and `meta.json` (problem, level, backend, device, speedup, hashes); `index.json`
over all of them; and `dataset/`, the same rows as a Hugging Face `datasets` dataset saved to disk
(`datasets.load_from_disk`), where `datasets` is installed.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any


class ExportError(ValueError):
    """Nothing to export, or an export folder that cannot be read back; says which and what to do."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "problem"


def export_kernels(out: str | Path, store=None, backend: str | None = None) -> dict[str, Any]:
    """Write the best correct kernel of every problem in the store under `out`; return the index."""
    from megakernel_gym.rewards.store import ResultsStore
    own = store is None
    store = store or ResultsStore()
    try:
        best = store.best(backend)
        path = store.path
    finally:
        if own:
            store.close()
    if not best:
        raise ExportError(f"no correct kernel with its source in the results store {path}"
                          + (f" for the {backend} backend" if backend else "")
                          + "; judge some first (mkgym judge PROBLEM CANDIDATE, or train a policy), or point "
                            "--store / MKGYM_STORE at the store that has them")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for res, source in best:
        folder = out / _slug(res.problem)
        folder.mkdir(exist_ok=True)
        (folder / "kernel.py").write_text(source)
        (folder / "result.json").write_text(res.to_json(indent=2))
        meta = {"problem": res.problem, "problem_sha256": res.problem_sha256, "candidate_sha256": res.candidate_sha256,
                "backend": res.backend, "device": res.device, "speedup": res.speedup,
                "speedups": res.speedups, "level": _level(res.problem)}
        (folder / "meta.json").write_text(json.dumps(meta, indent=2))
        rows.append({**meta, "speedups": json.dumps(res.speedups), "folder": folder.name, "source": source,
                     "result": res.to_json()})
    index = {"kernels": [{k: v for k, v in r.items() if k not in ("source", "result")} for r in rows],
             "store": str(path)}
    (out / "index.json").write_text(json.dumps(index, indent=2))
    try:
        import datasets   # optional ([data] extra): the same rows as a dataset on disk
    except ImportError:
        index["dataset"] = None
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(out / "dataset"))
        index["dataset"] = str(out / "dataset")
    return index


def _level(problem: str) -> int | None:
    try:
        from megakernel_gym.curriculum import get_problem
        return get_problem(problem).level
    except Exception:  # noqa: BLE001 - a user's own problem file: no level to report
        return None


def load_kernel(path: str | Path):
    """The exported kernel's `ModelNew` class, or its own `Model` where it has no ModelNew (construct
    it with the problem's init inputs, load the Model's state_dict, call it like Model). `path` is an
    export folder or its kernel.py.
    The code runs in this process: load only kernels you exported or trust."""
    path = Path(path)
    file = path / "kernel.py" if path.is_dir() else path
    if not file.is_file():
        raise ExportError(f"no kernel at {path}: expected an export folder with kernel.py (mkgym export --out DIR)")
    spec = importlib.util.spec_from_file_location(f"mkgym_kernel_{_slug(file.parent.name)}", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)   # Triton's @jit needs a real file behind the module: it reads the source
    from megakernel_gym.rewards.anticheat import candidate_class
    name = candidate_class(file.read_text())   # the class the judge ran
    if name is None or not hasattr(mod, name):
        raise ExportError(f"{file} defines no ModelNew (nor a Model class of its own)")
    return getattr(mod, name)


__all__ = ["export_kernels", "load_kernel", "ExportError"]
