"""Problems and candidates as the judge sees them: source text plus what the AST tells.

The judge never executes a problem or candidate in its own process: both are untrusted
(a user's problem file, an agent's kernel). Here they are only parsed; the workers run them.
"""
from __future__ import annotations

import ast
import hashlib
import math
import re
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Module-level metadata a problem may set as literals (DESIGN.md: Problem contract).
_LITERAL_META = ("LEVEL", "OP_TYPE", "DTYPES", "FORBIDDEN", "ATOL", "RTOL", "INPUT_TRANSFORMS",
                 "DESCRIPTION", "TAGS", "SPLIT", "KIND", "PRODUCTION")
# The baselines every problem is timed against on a GPU (rewards/reference_role.handle_baselines); a problem's
# PRODUCTION names more: the kernels a practitioner would use (issue 43), each "production:NAME".
BASELINES = ("eager", "cuda_graph", "torch_compile")
# A level-5 (megakernel) problem's, on the gpu backend (rewards/megakernel.py BASELINE_NAMES; the plain-PyTorch two
# where the zoo's PlainStep covers the model's family); on the sim backend the default schedule alone.
MEGAKERNEL_BASELINES = ("default_schedule", "eager", "cuda_graph", "plain_cuda_graph", "plain_torch_compile")


class ProblemError(ValueError):
    """The problem file itself is unusable; the message names the file and the fix."""


class ProblemUnservable(ProblemError):
    """The problem cannot run on this judge's backend at all, known before any candidate runs (say, its
    footprint is over what a cpu worker may hold): no candidate's doing, and the same for every one."""


class ProblemTrivial(ProblemUnservable):
    """A kernel that computes nothing would be scored correct on the problem (rewards/filters.trivial_answer)."""


class CandidateError(ValueError):
    """The candidate text is unusable before anything runs (not a module, no ModelNew...)."""


AST_LOCK = threading.RLock()   # re-entrant: guard.compile_candidate holds it around its own parse


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 keeps the AST builder's recursion depth in
    interpreter-wide state, and two threads parsing at once (a LocalPool's judges) can fail with
    "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905)."""
    with AST_LOCK:
        return ast.parse(source, filename=filename)


# How deep a candidate's syntax tree may nest (a `1+1+...` of n terms is n levels): the judge's checks (ast's
# visitors, RestrictedPython's transformer, compile) recurse once or a few times a level, so a tree deeper than
# Python's default 1,000 frames allow runs them on a thread of its own with the limit raised (deep_call).
# CPython's own parser stops near 3,000 levels; a source deeper than MAX_AST_DEPTH gets a clear refusal instead.
SHALLOW_AST_DEPTH = 150
MAX_AST_DEPTH = 2_000
_DEEP_FRAMES = 10_000     # Python frames for MAX_AST_DEPTH levels (about four a level), C-safe on a default stack
_DEEP_STACK = 256 << 20   # the deep walk's own thread stack (compile() recurses in C)
_deep = threading.local()
_deep_users = 0
_deep_saved = 1_000


class SourceTooDeep(ValueError):
    """The source nests deeper than the judge's checks follow; the message names the depth and the fix."""


def ast_depth(tree: ast.AST) -> int:
    """The syntax tree's depth in nodes, found without recursion."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def deep_call(fn, *args, depth: int):
    """fn(*args) for a syntax tree `depth` levels deep. A shallow one (nearly every source) is walked here
    as is; a deeper one with Python's recursion limit raised, on a thread with a 256 MiB stack (in a
    sandboxed worker, which may not start one, on its own), so an honest 900-term expression is checked
    rather than refused with a RecursionError; past MAX_AST_DEPTH, SourceTooDeep. The limit is
    interpreter-wide: it moves under AST_LOCK (no parse in flight) and stays raised while any deep walk runs."""
    global _deep_users, _deep_saved
    if depth <= SHALLOW_AST_DEPTH or getattr(_deep, "on", False):
        return fn(*args)
    if depth > MAX_AST_DEPTH:
        raise SourceTooDeep(f"the source nests {depth} levels deep (a long chain of operators, calls or "
                            f"brackets); the judge's checks follow up to {MAX_AST_DEPTH}: split it into "
                            "several statements")
    out: dict[str, Any] = {}

    def run():
        _deep.on = True
        try:
            out["value"] = fn(*args)
        except BaseException as e:   # handed back to the caller's thread as is
            out["error"] = e
        finally:
            _deep.on = False

    with AST_LOCK:
        if _deep_users == 0:
            _deep_saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_deep_saved, _DEEP_FRAMES))
        _deep_users += 1
    try:
        with AST_LOCK:
            saved_stack = threading.stack_size(_DEEP_STACK)
            try:
                worker = threading.Thread(target=run, name="deep-ast", daemon=True)
                worker.start()
            except (RuntimeError, MemoryError):   # a sandboxed worker: no clone(), a capped address space
                worker = None
            finally:
                threading.stack_size(saved_stack)
        if worker is None:
            run()
        else:
            worker.join()
    finally:
        with AST_LOCK:
            _deep_users -= 1
            if _deep_users == 0:
                sys.setrecursionlimit(_deep_saved)
    if "error" in out:
        raise out["error"]
    return out["value"]


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (a str Python holds but UTF-8 cannot: the hashes,
    files and compilers downstream would raise on it), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def sha256(text: str) -> str:
    # (surrogatepass: a lone surrogate in an agent's text hashes, and its evaluation says what is wrong)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _literal_meta(tree: ast.Module) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in _LITERAL_META:
                try:
                    meta[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass  # computed metadata: the worker reads it when it runs the module
    return meta


def tolerance_ok(v: float) -> bool:
    """An ATOL/RTOL the comparison can use: finite and not negative (red team 12: RTOL = math.nan passed every
    element, a zeros kernel correct)."""
    return math.isfinite(v) and v >= 0


_STRING_LISTS = ("DTYPES", "TAGS", "FORBIDDEN", "INPUT_TRANSFORMS")
_STRINGS = ("OP_TYPE", "DESCRIPTION", "SPLIT", "KIND")


def _check_meta(meta: dict[str, Any], where: str) -> None:
    """The literal metadata a problem file sets, of the types the judge and the listings read (red team 17:
    DTYPES = {"float32"} crashed `mkgym problems list --json`, ATOL = 1e999 printed Infinity, which is not JSON)."""
    def bad(name: str, want: str):
        raise ProblemError(f"{where}: {name} = {meta[name]!r:.80}: it must be {want}; fix the problem file")
    for name in _STRING_LISTS:
        if name in meta and not (isinstance(meta[name], (list, tuple)) and all(isinstance(x, str) for x in meta[name])):
            bad(name, "a list of strings")
    prod = meta.get("PRODUCTION")      # name -> why a practitioner would pick it (or the names alone)
    if prod is not None and not (isinstance(prod, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                for k, v in prod.items())
                                 or isinstance(prod, (list, tuple)) and all(isinstance(x, str) for x in prod)):
        bad("PRODUCTION", "a dict of names to descriptions (strings)")
    for name in _STRINGS:
        if name in meta and meta[name] is not None and not isinstance(meta[name], str):
            bad(name, "a string")
    if "LEVEL" in meta and meta["LEVEL"] is not None and (isinstance(meta["LEVEL"], bool) or not isinstance(meta["LEVEL"], int)):
        bad("LEVEL", "an integer")
    for name in ("ATOL", "RTOL"):
        v = meta.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not tolerance_ok(v)):
            bad(name, "a finite number >= 0")


# Metadata read before any of the problem's code runs (the static rules, listings, the curriculum's levels and
# splits), which therefore counts only as one literal; ATOL, RTOL and INPUT_TRANSFORMS may be computed (the
# worker reads them when it runs the module).
LITERAL_ONLY = ("FORBIDDEN", "SPLIT", "LEVEL", "KIND", "DTYPES", "TAGS", "OP_TYPE", "PRODUCTION", "DESCRIPTION")


def _literal_only(tree: ast.Module, meta: dict[str, Any], where: str) -> None:
    """Each LITERAL_ONLY name is bound once, to a literal: a computed value, a second binding or an augmented one
    would be silently ignored (red team 20: FORBIDDEN = ["triton.language." + n ...] let the forbidden call through,
    SPLIT = "held" + "out" put a held-out problem in training)."""
    def binds(name: str) -> list[ast.stmt]:
        return [n for n in tree.body
                if isinstance(n, ast.Assign) and any(isinstance(e, ast.Name) and e.id == name
                                                     for t in n.targets for e in ast.walk(t))
                or isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name)
                and n.target.id == name]
    for name in LITERAL_ONLY:
        found = binds(name)
        if found and (name not in meta or len(found) > 1):
            raise ProblemError(f"{where}: line {found[-1].lineno}: {name} must be set once, as a literal (such as "
                               f"{name} = {_EXAMPLE.get(name, repr('...'))}): the judge reads it before the file runs, "
                               "so a computed or second value would be ignored; fix the problem file")


_EXAMPLE = {"FORBIDDEN": "['torch.softmax']", "LEVEL": "1", "DTYPES": "['float32']", "TAGS": "['reduction']",
            "SPLIT": "'heldout'", "PRODUCTION": "{'liger': 'why a practitioner picks it'}"}


@dataclass(frozen=True)
class Problem:
    name: str
    source: str
    path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # A tolerance preset (correctness.TOLERANCE_PRESETS: "kernelbench", "kbv3") for a problem
    # that sets no ATOL/RTOL of its own; None: the judge's defaults. Set by the suite loaders'
    # and `mkgym judge`'s tolerance option.
    tolerance: str | None = None

    def __post_init__(self):
        from megakernel_gym.rewards.correctness import check_preset
        try:
            check_preset(self.tolerance)
        except ValueError as e:
            raise ProblemError(f"problem {self.name!r}: {e}") from None

    @property
    def sha256(self) -> str:
        # the results store's key: a verdict under one tolerance preset is not one under another
        # (after a NUL, which no Python source can hold: red team 12's file B, file A plus a line naming a preset,
        # hashed as A under that preset, and was served A's cached verdict)
        if self.tolerance is None:
            return sha256(self.source)
        return sha256(f"{self.source}\x00mkgym tolerance preset: {self.tolerance}")

    @property
    def level(self) -> int | None:
        return self.meta.get("LEVEL")

    @property
    def description(self) -> str:
        return self.meta.get("DESCRIPTION") or ""

    @property
    def production(self) -> dict[str, str]:
        """The production kernels the problem is timed against: name -> why a practitioner would pick it
        (its PRODUCTION literal; built by its production_baselines(model) in the reference worker)."""
        prod = self.meta.get("PRODUCTION")
        return {str(k): str(v) for k, v in prod.items()} if isinstance(prod, dict) else {}

    @property
    def baselines(self) -> list[str]:
        """Every baseline the problem is timed against on a GPU, by the name its EvalResult reports."""
        if self.meta.get("KIND") == "megakernel":
            return list(MEGAKERNEL_BASELINES)
        return list(BASELINES) + [f"production:{n}" for n in self.production]

    @classmethod
    def from_source(cls, source: str, name: str, path: str | None = None) -> "Problem":
        where = path or f"problem {name!r}"
        try:
            tree = parse_python(source, filename=path or name)
        except SyntaxError as e:
            raise ProblemError(f"{where}: syntax error at line {e.lineno}: {e.msg}; fix the problem file") from e
        except (RecursionError, MemoryError, ValueError) as e:
            # (red team 17: a 200,000-term constant expression raised RecursionError out of the parser, through the
            # judge server's loop, which ended, and through a suite's loader)
            raise ProblemError(f"{where}: the file cannot be parsed ({type(e).__name__}: nested too deep or too "
                               "large); fix the problem file") from None
        names = _top_level_names(tree)
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
        if missing:
            raise ProblemError(f"{where}: a problem must define {', '.join(missing)} at module level "
                               "(KernelBench format: class Model(nn.Module), get_inputs(), get_init_inputs())")
        meta = _literal_meta(tree)
        _check_meta(meta, where)
        _literal_only(tree, meta, where)
        return cls(name=name, source=source, path=path, meta=meta)

    @classmethod
    def from_file(cls, path: str | Path) -> "Problem":
        text = _read_source(path, "problem", "a .py file or a built-in name (see `mkgym problems list`)",
                            ProblemError)
        return cls.from_source(text, name=Path(path).stem, path=str(path))


# A fenced code block of a Markdown answer, any language (a ```cpp block's closing fence must not
# open a Python one). The closing fence may be missing: an answer cut off at the token limit ends
# inside its code.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.M | re.S)
_PYTHON_FENCES = ("python", "py", "python3", "")


def candidate_code(text: str) -> str:
    """The code to judge in a candidate's text. Python source is itself; an LLM's answer (prose
    around fenced blocks) gives its last block that defines `class ModelNew`, or `class Model`
    where no block defines ModelNew (the answers that show the problem first, then the kernel).
    Anything else comes back unchanged, so the judge reports its syntax error as it is."""
    try:
        parse_python(text, "<candidate>")
        return text
    except Exception:  # noqa: BLE001 - not Python, whatever the parser's complaint: look for fenced code
        pass
    # an answer with Windows line ends: its closing fences end in \r, which the fence's `$` would not meet
    answer = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = [textwrap.dedent(code) for lang, code in _FENCE.findall(answer) if lang.lower() in _PYTHON_FENCES]
    for name in ("ModelNew", "Model"):
        found = [b for b in blocks if re.search(rf"^class[ \t]+{name}\b", b, re.M)]
        if found:
            return found[-1]
    return text


# The longest candidate the judge reads (an answer's whole text): its static stage runs in the judge's own process,
# before any worker or time limit (the env's actions are at most 120,000 characters; an honest KernelBench answer
# is a few thousand)
MAX_CANDIDATE_CHARS = 1_000_000


@dataclass(frozen=True)
class Candidate:
    """`source` is the code judged (see candidate_code); `text` what was submitted, when it differs."""
    source: str
    path: str | None = None
    text: str = field(default="", repr=False, compare=False)

    def __post_init__(self):
        if len(self.source) > MAX_CANDIDATE_CHARS:
            return     # not parsed for its code block: the judge refuses it by its length (red team 12: 8 MB, 28 s)
        code = candidate_code(self.source)
        if code != self.source:
            object.__setattr__(self, "text", self.source)
            object.__setattr__(self, "source", code)

    @property
    def sha256(self) -> str:
        return sha256(self.source)

    @classmethod
    def from_file(cls, path: str | Path) -> "Candidate":
        return cls(_read_source(path, "candidate", "a .py file defining ModelNew (or Model), or an answer with a "
                                "```python block that does", CandidateError), str(path))


def _read_source(path: str | Path, kind: str, expected: str, error: type[ValueError]) -> str:
    p = Path(path)
    if not p.is_file():
        raise error(f"{kind} file {str(path)!r} does not exist; pass a path to {expected}")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{kind} file {str(path)!r} cannot be read as UTF-8 text: {e}") from e
