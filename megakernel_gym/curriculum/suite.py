"""Suites: named sets of problems with levels and a stable train/held-out split.

Sources, each a plain function returning a Suite:
  builtin_suite()             the problems shipped in curriculum/problems/
  load_kernelbench_dir(path)  a directory in KernelBench's layout: level1/19_ReLU.py, ...
  load_dataset_suite(ds)      a Hugging Face `datasets` dataset (object or saved path) with a code column
  Suite.from_files / Suite([...Problem...])   a user's own problems, from Python
  load_suite(spec)            any of the above from one string (the CLI's --suite)

A file or row that cannot be used does not sink the suite: it lands in `Suite.errors` with a
message naming it and the fix, and everything else loads. Problems are parsed only (their
code runs in the judge's workers), so loading a suite of untrusted files is safe.

Split: a problem's `SPLIT = "train" | "heldout"` literal wins; otherwise the split is a hash
of the problem's name (HELDOUT_FRACTION of names land in heldout). Neither depends on which
other problems are in the suite, so adding problems never moves existing ones.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

from megakernel_gym.rewards.problem import Problem, ProblemError

SPLITS = ("train", "heldout")
HELDOUT_FRACTION = 0.2
_LEVEL_DIR = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)


class SuiteError(ValueError):
    """The suite as a whole cannot be loaded (missing directory, wrong dataset columns)."""


@dataclass(frozen=True)
class LoadError:
    source: str      # the file or dataset row
    message: str     # what is wrong and the fix

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"


def hash_split(name: str, heldout_fraction: float = HELDOUT_FRACTION) -> str:
    h = int(hashlib.sha256(f"mkgym-split:{name}".encode()).hexdigest()[:8], 16)
    return "heldout" if h / 2**32 < heldout_fraction else "train"


def split_of(problem: Problem) -> str:
    s = problem.meta.get("SPLIT")
    return s if s in SPLITS else hash_split(problem.name)


@dataclass
class Suite:
    problems: list[Problem]
    errors: list[LoadError] = field(default_factory=list)
    name: str = "suite"

    def __post_init__(self):
        seen: dict[str, Problem] = {}
        for p in self.problems:
            if p.name in seen:
                raise SuiteError(f"{self.name}: two problems are named {p.name!r} "
                                 f"({seen[p.name].path or '?'} and {p.path or '?'}); names must be unique")
            seen[p.name] = p
        self._by_name = seen

    # -- access ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return [p.name for p in self.problems]

    def get(self, name: str) -> Problem:
        try:
            return self._by_name[name]
        except KeyError:
            near = [n for n in self._by_name if name.lower() in n.lower()][:5]
            hint = f"; did you mean {', '.join(near)}?" if near else "; see `mkgym problems list`"
            raise ProblemError(f"no problem {name!r} in {self.name}{hint}") from None

    def levels(self) -> list[int]:
        return sorted({p.level for p in self.problems if p.level is not None})

    def filter(self, level: int | None = None, split: str | None = None, tags: Iterable[str] = ()) -> "Suite":
        if split is not None and split not in SPLITS:
            raise SuiteError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        tags = set(tags)
        keep = [p for p in self.problems
                if (level is None or p.level == level) and (split is None or split_of(p) == split)
                and tags <= set(p.meta.get("TAGS") or ())]
        return Suite(keep, [], f"{self.name}[level={level}, split={split}]" if level or split else self.name)

    def rows(self) -> list[dict[str, Any]]:
        """One summary dict per problem (what `mkgym problems list` prints)."""
        return [{"name": p.name, "level": p.level, "split": split_of(p), "op_type": p.meta.get("OP_TYPE"),
                 "dtypes": p.meta.get("DTYPES"), "tags": list(p.meta.get("TAGS") or ()),
                 "description": p.description, "path": p.path, "baselines": p.baselines} for p in self.problems]

    # -- construction from a user's files ------------------------------------------------
    @classmethod
    def from_files(cls, paths: Iterable[str | Path], name: str = "files", level: int | None = None) -> "Suite":
        problems, errors = [], []
        for path in paths:
            try:
                p = Problem.from_file(path)
            except ProblemError as e:
                errors.append(LoadError(str(path), str(e)))
                continue
            problems.append(_with_level(p, level))
        return cls(problems, errors, name)


def _check_tolerance(tolerance: str | None) -> str | None:
    from megakernel_gym.rewards.correctness import check_preset
    try:
        return check_preset(tolerance)
    except ValueError as e:
        raise SuiteError(str(e)) from None


def _with_tolerance(p: Problem, tolerance: str | None) -> Problem:
    return p if tolerance is None else replace(p, tolerance=tolerance)


def _all_with_tolerance(suite: Suite, tolerance: str | None) -> Suite:
    if tolerance is None:
        return suite
    return Suite([_with_tolerance(p, tolerance) for p in suite.problems], suite.errors, suite.name)


def _with_level(p: Problem, level: int | None) -> Problem:
    """A level from the layout (folder or dataset column) when the file sets none itself."""
    if level is None or p.meta.get("LEVEL") is not None:
        return p
    return replace(p, meta={**p.meta, "LEVEL": level})


# ---------------------------------------------------------------------------------------
# sources


def builtin_suite() -> Suite:
    pkg = resources.files("megakernel_gym.curriculum") / "problems"
    problems, errors = [], []
    for f in sorted(pkg.iterdir(), key=lambda f: f.name):
        if not f.name.endswith(".py") or f.name.startswith("_"):
            continue
        try:
            problems.append(Problem.from_source(f.read_text(), name=f.name[:-3], path=str(f)))
        except ProblemError as e:
            errors.append(LoadError(str(f), str(e)))
    return Suite(problems, errors, "builtin")


def load_kernelbench_dir(path: str | Path, tolerance: str | None = None) -> Suite:
    """KernelBench's layout: ROOT/level1/19_ReLU.py ... Problem names are 'level1/19_ReLU'; the
    level comes from the folder unless the file sets LEVEL. Loose .py files directly under ROOT
    load too, with no level. `tolerance`: a preset ("kernelbench", "kbv3") the problems are
    judged under where a file sets no ATOL/RTOL (None: the judge's defaults)."""
    tolerance = _check_tolerance(tolerance)
    root = Path(path)
    if not root.is_dir():
        raise SuiteError(f"{path!r} is not a directory; pass a folder holding level1/, level2/, ... "
                         "(KernelBench's layout) or .py problem files")
    problems, errors = [], []
    found = False
    for sub in sorted(root.iterdir()):
        m = _LEVEL_DIR.match(sub.name)
        if sub.is_dir() and m:
            files, level, prefix = sorted(sub.glob("*.py")), int(m.group(1)), f"{sub.name}/"
        elif sub.is_file() and sub.suffix == ".py" and not sub.name.startswith("_"):
            files, level, prefix = [sub], None, ""
        else:
            continue
        for f in files:
            if f.name.startswith("_"):
                continue
            found = True
            try:
                p = Problem.from_file(f)
            except ProblemError as e:
                errors.append(LoadError(str(f), str(e)))
                continue
            problems.append(_with_tolerance(_with_level(replace(p, name=prefix + f.stem), level), tolerance))
    if not found:
        raise SuiteError(f"{path!r} holds no problem files; expected level1/NN_Name.py, level2/... "
                         "(KernelBench's layout) or .py files")
    return Suite(problems, errors, str(root))


def load_dataset_suite(dataset: Any, code_column: str = "code", name_column: str | None = None,
                       level_column: str | None = "level", split: str | None = None,
                       tolerance: str | None = None) -> Suite:
    """Problems from a Hugging Face `datasets` Dataset or DatasetDict, or a path saved with
    `save_to_disk`. Each row's `code_column` holds a KernelBench-format source. Names come from
    `name_column` (default: the first of name, problem_name, problem_id present), else the row
    index; levels from `level_column`, else from a DatasetDict split named like level_1.
    `tolerance`: a preset, as for load_kernelbench_dir."""
    import datasets  # Hugging Face datasets: the format RL datasets of kernels ship in

    tolerance = _check_tolerance(tolerance)

    where = str(dataset) if isinstance(dataset, (str, Path)) else type(dataset).__name__
    if isinstance(dataset, (str, Path)):
        try:
            dataset = datasets.load_from_disk(str(dataset))
        except (FileNotFoundError, ValueError) as e:
            raise SuiteError(f"cannot load a dataset from {where!r}: {e}; pass a folder written by "
                             "Dataset.save_to_disk, or a Dataset object") from e
    if isinstance(dataset, datasets.DatasetDict):
        parts = [(s, dataset[s]) for s in ([split] if split else sorted(dataset))]
        if split and split not in dataset:
            raise SuiteError(f"dataset {where} has no split {split!r}; it has {', '.join(dataset)}")
    elif isinstance(dataset, datasets.Dataset):
        parts = [(split or "", dataset)]
    else:
        raise SuiteError(f"expected a datasets.Dataset, DatasetDict or a saved-dataset path, got {where}")
    problems, errors = [], []
    for part, ds in parts:
        cols = ds.column_names
        if code_column not in cols:
            raise SuiteError(f"dataset {where}{'[' + part + ']' if part else ''} has no column {code_column!r} "
                             f"(columns: {', '.join(cols)}); pass code_column= naming the one with the source")
        ncol = name_column or next((c for c in ("name", "problem_name", "problem_id") if c in cols), None)
        if name_column and name_column not in cols:
            raise SuiteError(f"dataset {where} has no column {name_column!r} (columns: {', '.join(cols)})")
        m = re.search(r"(\d+)$", part or "")
        part_level = int(m.group(1)) if m and "level" in part.lower() else None
        for i, row in enumerate(ds):
            label = f"{where}{'[' + part + ']' if part else ''} row {i}"
            name = str(row[ncol]) if ncol and row.get(ncol) is not None else f"row{i}"
            if part and len(parts) > 1:
                name = f"{part}/{name}"
            code = row.get(code_column)
            if not isinstance(code, str) or not code.strip():
                errors.append(LoadError(label, f"column {code_column!r} is empty or not text"))
                continue
            try:
                p = Problem.from_source(code, name=name, path=None)
            except ProblemError as e:
                errors.append(LoadError(label, str(e)))
                continue
            level = row.get(level_column) if level_column and level_column in cols else part_level
            try:
                level = int(level) if level is not None else None
            except (TypeError, ValueError):
                errors.append(LoadError(label, f"column {level_column!r} holds {level!r}, not a level number"))
                continue
            problems.append(_with_tolerance(_with_level(p, level), tolerance))
    seen: set[str] = set()
    unique = []
    for p in problems:  # datasets do repeat names; the first wins, the rest are reported
        if p.name in seen:
            errors.append(LoadError(p.name, "a second row with this name; skipped (names must be unique)"))
            continue
        seen.add(p.name)
        unique.append(p)
    return Suite(unique, errors, where)


# Where `--suite kernelbench` finds KernelBench's problem files (level1/ ... level3/, unchanged; the
# project does not ship them): $MKGYM_KERNELBENCH, else a clone of KernelBench in or beside the
# working directory (its problems are in KernelBench/KernelBench/), else the `shared/kernelbench`
# folder beside this checkout (the layout CI runs in).
KERNELBENCH_ENV = "MKGYM_KERNELBENCH"


def kernelbench_dirs() -> list[Path]:
    """The folders `kernelbench` may name, in the order they are tried ($MKGYM_KERNELBENCH alone where set:
    an explicit folder is not silently passed over)."""
    env = os.environ.get(KERNELBENCH_ENV)
    if env:
        return [Path(env).expanduser()]
    cwd = Path.cwd()
    return [cwd / "KernelBench" / "KernelBench", cwd.parent / "KernelBench" / "KernelBench",
            Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench"]


def kernelbench_dir() -> Path:
    """The KernelBench problem folder (kernelbench_dirs' first that holds level1/), or SuiteError saying
    where it looked and how to point at one."""
    tried = kernelbench_dirs()
    for d in tried:
        if (d / "level1").is_dir():
            return d
    if os.environ.get(KERNELBENCH_ENV):
        raise SuiteError(f"{KERNELBENCH_ENV}={os.environ[KERNELBENCH_ENV]!r} holds no level1/ folder: point it at "
                         "the folder with level1/ level2/ level3/ (in a clone of KernelBench, KernelBench/KernelBench)")
    raise SuiteError("suite 'kernelbench': KernelBench's problem files were not found (looked in "
                     + ", ".join(str(d) for d in tried) + "). Clone https://github.com/ScalingIntelligence/KernelBench "
                     f"and set {KERNELBENCH_ENV} to its KernelBench/KernelBench folder (the one with level1/)")


def load_suite(spec: str | None, tolerance: str | None = None) -> Suite:
    """'builtin' (or None), 'kernelbench' (KernelBench's levels 1-3 as they ship: kernelbench_dir), a
    KernelBench-layout folder, a saved `datasets` folder, or a .py file; `tolerance` a preset for an
    imported suite (see load_kernelbench_dir)."""
    tolerance = _check_tolerance(tolerance)
    if spec in (None, "", "builtin"):
        return _all_with_tolerance(builtin_suite(), tolerance)
    if spec == "kernelbench":
        return load_kernelbench_dir(kernelbench_dir(), tolerance=tolerance)
    p = Path(spec)
    if p.is_file():
        return _all_with_tolerance(Suite.from_files([p], name=str(p)), tolerance)
    if p.is_dir():
        if (p / "dataset_info.json").is_file() or (p / "dataset_dict.json").is_file():
            return load_dataset_suite(p, tolerance=tolerance)
        return load_kernelbench_dir(p, tolerance=tolerance)
    raise SuiteError(f"no suite {spec!r}: pass 'builtin', 'kernelbench', a KernelBench-layout folder, a folder "
                     "written by datasets' save_to_disk, or a .py problem file")


__all__ = ["HELDOUT_FRACTION", "LoadError", "SPLITS", "Suite", "SuiteError", "builtin_suite", "hash_split",
           "load_dataset_suite", "load_kernelbench_dir", "load_suite", "split_of", "kernelbench_dir",
           "kernelbench_dirs", "KERNELBENCH_ENV"]
