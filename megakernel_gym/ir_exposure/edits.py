"""What the agent says: the edit language over the IR.

One edit per line (blank lines and `#` comments are skipped):

    tile OP n=SIZE                tile size along OP's tile axis (a divisor of its extent)
    assign OP sms=FIRST-LAST      the SM range OP's tasks are dealt over (sms=N for one SM, sms=all)
    order OP before|after OTHER   move OP in the queue-filling order (it must stay after what it
                                  depends on and before what depends on it)
    counter OP tile|op            one counter per tile, or one counter for the whole op
    prefetch OP depth=N           weight tiles loaded ahead (0-8; ops that read a weight)
    fuse OP into CONSUMER         fold OP into its sole consumer (patterns pair each op with the
                                  consumer it feeds: `fuse layers.*.mlp.up_proj into layers.*.mlp.silu_mul`)
    inline OP                     compute OP on chip inside every consumer's task, so it needs no task and no
                                  trip through memory (an rmsnorm whose consumers are matmuls reading it
                                  as their input: `inline layers.*.attn.norm`); `unfuse OP` undoes it
    split OP n=PARTS              cut each tile of a decode_attention into PARTS tasks over slices of the
                                  cached positions; the last part to finish combines them (1-64; n=1 undoes)
    inflight OP n=N               at most N of the weight ring's copies in flight while matmul OP's weights
                                  stream (1-16; n=0 takes the compiler's own cap back): fewer copies on
                                  their way keep dependency polls short, more keep memory busier
    ahead OP n=N                  the same, while matmul OP's task still waits for its inputs (its weights filling
                                  the ring ahead of it; 1-7; n=0: no cap of its own): fewer copies then keep
                                  the chip's polls short while the ring still fills
    unfuse OP                     undo a fusion (OP is the fused producer, or the consumer)
    impl OP <<<code>>>            replace OP's task body (code may span lines)
    unimpl OP                     go back to the generated task body

OP may be a pattern for every verb but `order`: `*` matches any text, `{i}` any layer
number, `{3..7}` a number in a range (`tile layers.*.attn.q_proj n=32`, `assign layers.{0..7}.mlp.*
sms=0-65`); a number in a pattern is a whole number of the name (`layers.*{3..7}` does not take
layer 23's 3). Patterns match in time linear in the name and the pattern (`_pattern`). Numbers are
written with the digits 0-9 (another script's digits are refused, not read). The same edits as
JSON, for structured policies in Python: a list of objects such as {"verb": "tile", "op": OP, "n": 64}
(`edits_from_json`, `Edit.to_json`; the env's actions are the text form, so such a policy sends
`format_edits(edits_from_json(obj))`).

What one batch may cost is capped: MAX_EDIT_CHARS of text and MAX_EDITS edits, at most MAX_TASKS
tasks (ir.py) and MAX_DEPENDENCIES task dependencies (compiler/tasks.py: counted before any is
built, and the refusal names the ops that give the most), and at most MAX_IMPL_OPS ops with an
impl body.

`apply_edits(ir, text)` checks every edit against the IR as the earlier edits left it, then
plans the result and runs the validator. A batch is all or nothing: the first bad edit raises
EditError, whose message says what was wrong and what is allowed, and the IR given is untouched
(IRs are values; a new one is returned on success).
"""
from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass

from megakernel_gym.compiler.schedule import COUNTER_MODES
from megakernel_gym.compiler.tasks import INLINE
from megakernel_gym.compiler.legality import IR as LegalIR
from megakernel_gym.compiler.legality import (MAX_TASKS, IRError, ahead_problem, fusion_problem, impl_conflict,
                                              impl_problem, inflight_problem, inflight_rows_problem, inline_problem,
                                              prefetch_problem, sms_problem, split_problem, task_count, tile_problem)
from megakernel_gym.compiler.validate import ScheduleError
from megakernel_gym.ir_exposure.ir import IR

MAX_EDITS = 1000
MAX_EDIT_CHARS = 200_000
# ops with an impl body in one IR: one op of every layer of a 32-layer model (each body is compiled into the
# megakernel; what they weigh together is capped by MAX_IMPL_TOTAL_CHARS, compiler/impl_guard.py)
MAX_IMPL_OPS = 32

USAGE = {
    "tile": "tile OP n=SIZE",
    "assign": "assign OP sms=FIRST-LAST (or sms=N, sms=all)",
    "order": "order OP before OTHER (or after OTHER)",
    "counter": "counter OP tile (or op)",
    "prefetch": "prefetch OP depth=N",
    "fuse": "fuse OP into CONSUMER",
    "inline": "inline OP",
    "split": "split OP n=PARTS",
    "inflight": "inflight OP n=N",
    "ahead": "ahead OP n=N",
    "unfuse": "unfuse OP",
    "impl": "impl OP <<<code>>>",
    "unimpl": "unimpl OP",
}
VERBS = tuple(USAGE)
_SINGLE = ("order",)                 # verbs whose ops must be named exactly, one each


class EditError(ValueError):
    """A malformed or unsafe edit. `index` is the 1-based edit (or edit-text line) at fault."""

    def __init__(self, message: str, index: int | None = None, edit: "Edit | None" = None):
        self.index, self.edit = index, edit
        super().__init__(message)


@dataclass(frozen=True)
class Edit:
    verb: str
    op: str
    n: int | None = None                    # tile: tile size; split: parts; inflight, ahead: copies
    sms: tuple[int, int] | None = None      # assign: (first, last); None = the whole chip
    where: str | None = None                # order: "before" | "after"
    other: str | None = None                # order: the op to move next to; fuse: the consumer
    mode: str | None = None                 # counter: "tile" | "op"
    depth: int | None = None                # prefetch
    code: str | None = None                 # impl

    def to_text(self) -> str:
        v, op = self.verb, self.op
        if v == "tile":
            return f"tile {op} n={self.n}"
        if v in ("split", "inflight", "ahead"):
            return f"{v} {op} n={self.n}"
        if v == "assign":
            return f"assign {op} sms=" + ("all" if self.sms is None else f"{self.sms[0]}-{self.sms[1]}")
        if v == "order":
            return f"order {op} {self.where} {self.other}"
        if v == "counter":
            return f"counter {op} {self.mode}"
        if v == "prefetch":
            return f"prefetch {op} depth={self.depth}"
        if v == "fuse":
            return f"fuse {op} into {self.other}"
        if v == "impl":
            return f"impl {op} <<<{self.code}>>>"
        return f"{v} {op}"

    def to_json(self) -> dict:
        d: dict = {"verb": self.verb, "op": self.op}
        v = self.verb
        if v in ("tile", "split", "inflight", "ahead"):
            d["n"] = self.n
        elif v == "assign":
            d["sms"] = "all" if self.sms is None else [self.sms[0], self.sms[1]]
        elif v == "order":
            d[self.where] = self.other
        elif v == "counter":
            d["mode"] = self.mode
        elif v == "prefetch":
            d["depth"] = self.depth
        elif v == "fuse":
            d["into"] = self.other
        elif v == "impl":
            d["code"] = self.code
        return d

    def brief(self) -> str:
        t = self.to_text()
        return t if len(t) <= 120 else t[:117] + "..."


# ---------------------------------------------------------------------------------------
# text -> edits


_NUM = r"([0-9]{1,9})"           # ASCII digits only: Python's \d and int() take any script's digits
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")   # a decimal digit of another script (Arabic-Indic, Devanagari, fullwidth ...)
MAX_NUMBER = 999_999_999        # the largest number an edit may give (nine digits, as the text form reads)


def _digit_problem(text: str) -> str | None:
    """Why `text` cannot be read as edit-language numbers and names (a digit other than 0-9), or None."""
    m = _OTHER_DIGIT.search(text)
    if m is None:
        return None
    c = m.group(0)
    return (f"`{c}` ({unicodedata.name(c, 'a digit')}, U+{ord(c):04X}) is not an ASCII digit; write numbers with the "
            f"digits 0-9 (e.g. `sms=0-9`, `n=64`)")


def _usage_all() -> str:
    return "; ".join(USAGE.values())


def parse_edits(text: str) -> list[Edit]:
    """The edits in `text`, one per line; EditError (line-numbered) for anything malformed."""
    if not isinstance(text, str):
        raise EditError(f"edits must be text, got {type(text).__name__}")
    if len(text) > MAX_EDIT_CHARS:
        raise EditError(f"the edit text is {len(text)} characters, over the limit of {MAX_EDIT_CHARS}")
    edits: list[Edit] = []
    pos, ln = 0, 0
    while pos < len(text):
        nl = text.find("\n", pos)
        line = text[pos:nl if nl >= 0 else len(text)]
        ln += 1
        start_ln = ln
        nxt = nl + 1 if nl >= 0 else len(text)
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            if stripped.split()[0] == "impl":
                lt = pos + line.find("impl")
                open_at = text.find("<<<", lt, nl if nl >= 0 else len(text))
                head = text[lt:open_at].split() if open_at >= 0 else stripped.split()
                if open_at < 0 or len(head) != 2:
                    raise EditError(f"edit line {ln}: expected `{USAGE['impl']}` (the code between <<< and >>>), "
                                    f"got `{_cut(stripped)}`", index=ln)
                msg = _digit_problem(head[1])
                if msg:
                    raise EditError(f"edit line {ln}: {msg}", index=ln)
                close = text.find(">>>", open_at + 3)
                if close < 0:
                    raise EditError(f"edit line {ln}: the code of `impl {head[1]}` is never closed with >>>",
                                    index=ln)
                code = text[open_at + 3:close]
                ln += code.count("\n")
                end_nl = text.find("\n", close)
                rest = text[close + 3:end_nl if end_nl >= 0 else len(text)]
                if rest.strip():
                    raise EditError(f"edit line {ln}: unexpected text after >>>: `{_cut(rest.strip())}`", index=ln)
                edits.append(Edit("impl", head[1], code=code))
                nxt = end_nl + 1 if end_nl >= 0 else len(text)
            else:
                edits.append(_parse_line(stripped, start_ln))
            if len(edits) > MAX_EDITS:
                raise EditError(f"more than {MAX_EDITS} edits in one batch; send fewer", index=start_ln)
        pos = nxt
    return edits


def _parse_line(line: str, ln: int) -> Edit:
    msg = _digit_problem(line)
    if msg:
        raise EditError(f"edit line {ln}: {msg}", index=ln)
    toks = line.split()
    verb = toks[0]

    def bad(msg: str = "") -> EditError:
        return EditError(f"edit line {ln}: " + (msg or f"expected `{USAGE[verb]}`, got `{_cut(line)}`"), index=ln)
    if verb not in USAGE:
        raise EditError(f"edit line {ln}: unknown verb `{_cut(verb, 40)}`; the edits are: {_usage_all()}", index=ln)
    if len(toks) < 2:
        raise bad()
    op, args = toks[1], toks[2:]
    if verb in ("tile", "split", "inflight", "ahead"):
        m = re.fullmatch(r"(?:n=)?" + _NUM, args[0]) if len(args) == 1 else None
        if not m:
            raise bad()
        return Edit(verb, op, n=int(m.group(1)))
    if verb == "assign":
        m = re.fullmatch(r"(?:sms=)?(?:" + _NUM + r"(?:-" + _NUM + r")?|(all))", args[0]) if len(args) == 1 else None
        if not m:
            raise bad()
        if m.group(3):
            return Edit("assign", op, sms=None)
        lo = int(m.group(1))
        return Edit("assign", op, sms=(lo, int(m.group(2)) if m.group(2) else lo))
    if verb == "order":
        if len(args) != 2 or args[0] not in ("before", "after"):
            raise bad()
        return Edit("order", op, where=args[0], other=args[1])
    if verb == "counter":
        m = re.fullmatch(r"(?:mode=)?(\w+)", args[0], re.ASCII) if len(args) == 1 else None
        if not m:
            raise bad()
        if m.group(1) not in COUNTER_MODES:
            raise bad(f"counter mode must be one of: {', '.join(COUNTER_MODES)} (`{USAGE['counter']}`), "
                      f"got `{_cut(m.group(1), 40)}`")
        return Edit("counter", op, mode=m.group(1))
    if verb == "prefetch":
        m = re.fullmatch(r"(?:depth=)?" + _NUM, args[0]) if len(args) == 1 else None
        if not m:
            raise bad()
        return Edit("prefetch", op, depth=int(m.group(1)))
    if verb == "fuse":
        if len(args) != 2 or args[0] != "into":
            raise bad()
        return Edit("fuse", op, other=args[1])
    if args:          # inline, unfuse, unimpl
        raise bad()
    return Edit(verb, op)


def _show(v, limit: int = 200) -> str:
    """A JSON value for a message, short, whatever it is (repr of a 5,000-digit int raises; a list's
    repr may run to megabytes)."""
    if isinstance(v, (bool, float)) or v is None:
        return repr(v)
    if isinstance(v, int):
        return repr(v) if abs(v) < 10 ** 60 else "an integer of more than 60 digits"
    if isinstance(v, str):
        return repr(v[:limit])
    if isinstance(v, (list, dict)):
        values = list(v.values()) if isinstance(v, dict) else v
        if len(v) > 8 or any(isinstance(x, (list, dict)) for x in values):
            return f"a {type(v).__name__} of {len(v)} items"
        if isinstance(v, list):
            return "[" + ", ".join(_show(x, 40) for x in v) + "]"
        return "{" + ", ".join(f"{_show(k, 40)}: {_show(x, 40)}" for k, x in v.items()) + "}"
    return f"a {type(v).__name__}"


def _cut(s: str, limit: int = 120) -> str:
    return s if len(s) <= limit else s[:limit - 3] + "..."


def format_edits(edits: list[Edit]) -> str:
    return "".join(e.to_text() + "\n" for e in edits)


# ---------------------------------------------------------------------------------------
# JSON <-> edits


_JSON_KEYS = {"tile": {"n"}, "assign": {"sms"}, "order": {"before", "after"}, "counter": {"mode"},
              "prefetch": {"depth"}, "fuse": {"into"}, "inline": set(), "split": {"n"}, "inflight": {"n"},
              "ahead": {"n"}, "unfuse": set(),
              "impl": {"code"}, "unimpl": set()}


def edits_to_json(edits: list[Edit]) -> list[dict]:
    return [e.to_json() for e in edits]


def edits_from_json(obj) -> list[Edit]:
    """Edits from their JSON form: a list of objects (or one object, or a JSON string of either)."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except ValueError as e:
            raise EditError(f"the JSON edits do not parse: {e}") from None
    if isinstance(obj, dict):
        obj = [obj]
    if not isinstance(obj, list):
        raise EditError(f"JSON edits must be a list of objects like {{\"verb\": \"tile\", \"op\": OP, \"n\": 64}}, "
                        f"got {type(obj).__name__}")
    if len(obj) > MAX_EDITS:
        raise EditError(f"more than {MAX_EDITS} edits in one batch; send fewer")
    return [_from_json(d, i) for i, d in enumerate(obj, 1)]


def _from_json(d, i: int) -> Edit:
    def bad(msg: str) -> EditError:
        return EditError(f"JSON edit {i}: {msg}", index=i)
    if not isinstance(d, dict):
        raise bad(f"expected an object, got {type(d).__name__}")
    verb = d.get("verb")
    if verb not in USAGE:
        raise bad(f"\"verb\" must be one of {', '.join(VERBS)}, got {_cut(_show(verb), 40)}")
    op = d.get("op")
    if not isinstance(op, str) or not op or any(c.isspace() for c in op):
        raise bad(f"\"op\" must be an op name (a string without spaces), got {_cut(_show(op), 60)}")
    for key in ("op", "into", "before", "after", "sms", "mode"):
        msg = _digit_problem(d[key]) if isinstance(d.get(key), str) else None
        if msg:
            raise bad(f"\"{key}\": {msg}")
    extra = set(d) - {"verb", "op"} - _JSON_KEYS[verb]
    if extra:
        raise bad(f"unexpected key(s) {', '.join(sorted(map(str, extra)))} for {verb}; it takes "
                  + (", ".join(sorted(_JSON_KEYS[verb])) or "only verb and op"))

    def integer(key: str) -> int:
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad(f"{verb} needs an integer \"{key}\" (`{USAGE[verb]}`), got {_cut(_show(v), 40)}")
        if not 0 <= v <= MAX_NUMBER:
            raise bad(f"\"{key}\" is {_cut(_show(v), 40)}, out of range: numbers in edits are 0-{MAX_NUMBER:,}")
        return v

    def name(key: str) -> str:
        v = d.get(key)
        if not isinstance(v, str) or not v or any(c.isspace() for c in v):
            raise bad(f"\"{key}\" must be an op name, got {_cut(_show(v), 60)}")
        return v
    if verb in ("tile", "split", "inflight", "ahead"):
        return Edit(verb, op, n=integer("n"))
    if verb == "assign":
        v = d.get("sms")
        if v in ("all", None) and "sms" in d:
            return Edit("assign", op, sms=None)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_NUMBER:
            return Edit("assign", op, sms=(v, v))
        if isinstance(v, str) and re.fullmatch(_NUM + "-" + _NUM, v):
            lo, hi = v.split("-")
            return Edit("assign", op, sms=(int(lo), int(hi)))
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                      and 0 <= x <= MAX_NUMBER for x in v):
            return Edit("assign", op, sms=(v[0], v[1]))
        raise bad(f"assign needs \"sms\": [FIRST, LAST] (or \"all\"), SM numbers 0-{MAX_NUMBER:,}, got "
                  f"{_cut(_show(v), 40)}")
    if verb == "order":
        keys = [k for k in ("before", "after") if k in d]
        if len(keys) != 1:
            raise bad("order needs exactly one of \"before\": OTHER or \"after\": OTHER")
        return Edit("order", op, where=keys[0], other=name(keys[0]))
    if verb == "counter":
        if d.get("mode") not in COUNTER_MODES:
            raise bad(f"counter needs \"mode\": one of {', '.join(COUNTER_MODES)}, got {_cut(_show(d.get('mode')), 40)}")
        return Edit("counter", op, mode=d["mode"])
    if verb == "prefetch":
        return Edit("prefetch", op, depth=integer("depth"))
    if verb == "fuse":
        return Edit("fuse", op, other=name("into"))
    if verb == "impl":
        if not isinstance(d.get("code"), str):
            raise bad(f"impl needs \"code\": the task body as a string, got {_cut(_show(d.get('code')), 40)}")
        return Edit("impl", op, code=d["code"])
    return Edit(verb, op)


# ---------------------------------------------------------------------------------------
# applying


class _Reject(Exception):
    pass


_TOKEN = re.compile(r"\*|\{(?:([0-9]{1,6})\.\.([0-9]{1,6})|[A-Za-z_][A-Za-z0-9_]*(?:-1)?)\}")
_BRACES = re.compile(r"\{(?:[0-9]{1,6}\.\.[0-9]{1,6}|[A-Za-z_][A-Za-z0-9_]*(?:-1)?)\}")
_STARS = re.compile(r"\*\*+")
_NAME_CHARS = 1000        # longer than any op name (a 1B decoder's longest has 35 characters)


def _pattern(op: str) -> tuple[int, str | None] | None:
    """_op_pattern, remembered for the last few patterns of at most 1,000 characters."""
    return _op_pattern_kept(op) if len(op) <= 1000 else _op_pattern(op)


def _op_pattern(op: str, whole: bool = False) -> tuple[int, str | None] | None:
    """An op pattern as (the fewest characters a name it matches has, a regex that matches in time
    linear in the name and the pattern), or None for a plain name. The regex is None where no op
    name is that long (unless `whole`): a 200k-character pattern costs its length, no more.

    `*` is any text, `{i}` (any name in braces) a whole number (no digit just before or after it),
    `{lo..hi}` a whole number in the range. A run of `*` is one `*`. The text between stars is a
    segment with no choices: a literal, a number that takes every digit that follows it
    (possessive), a range that is one number of a fixed count of digits; so where a segment
    matches, from any start, is decided, and a later start never ends earlier. Then the classic
    glob argument holds: taking each middle segment at its first match leaves the most room for
    the rest, so it is committed (an atomic group) and never tried again. A regex that backtracks
    into every `.*` instead tries all placements of the stars: `*` * 14 + `Q` took over a minute
    per step on a 1B model's op names."""
    if "*" not in op and "{" not in op:
        return None
    op = _STARS.sub("*", op)
    fewest = len(op) - op.count("*") - sum(len(m.group(0)) - 1 for m in _BRACES.finditer(op))
    if fewest > _NAME_CHARS and not whole:
        return fewest, None       # longer than any op name: never matched, so never compiled
    segments: list[list[str]] = [[]]
    fewest, i = 0, 0
    for m in _TOKEN.finditer(op):
        if m.start() > i:
            segments[-1].append(re.escape(op[i:m.start()]))
            fewest += m.start() - i
        if m.group(0) == "*":
            if segments[-1] or len(segments) == 1:
                segments.append([])
        elif m.group(1) is not None:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise _Reject(f"the range {m.group(0)} in {_cut(op, 80)} is empty: write the smaller number first "
                              f"({{{hi}..{lo}}})")
            segments[-1].append("(?<![0-9])(?:" + "|".join(p + "(?![0-9])" for p in _range_pieces(lo, hi)) + ")")
            fewest += 1
        else:
            segments[-1].append("(?<![0-9])[0-9]++")
            fewest += 1
        i = m.end()
    if i < len(op):
        segments[-1].append(re.escape(op[i:]))
        fewest += len(op) - i
    if len(segments) == 1:
        return fewest, "".join(segments[0])
    first, *middle, last = ["".join(seg) for seg in segments]
    return fewest, first + "".join(f"(?>.*?{seg})" for seg in middle) + ".*" + last


_op_pattern_kept = functools.lru_cache(maxsize=256)(_op_pattern)


def _range_pieces(lo: int, hi: int) -> list[str]:
    """Regexes of fixed-length digit strings that together match exactly the numbers lo..hi, written
    without leading zeros (lo <= hi)."""
    out = []
    for d in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (d - 1) if d > 1 else 0), min(hi, 10 ** d - 1)
        if a <= b:
            out += _same_length(str(a), str(b))
    return out


def _same_length(a: str, b: str) -> list[str]:
    """Regexes for the digit strings from a to b, both of the same length (a <= b)."""
    if a == b:
        return [a]
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [a[0] + p for p in _same_length(a[1:], b[1:])]
    n = len(a) - 1
    out, head, top = [], int(a[0]), int(b[0])
    if a[1:] != "0" * n:                     # a's first digit with tails from a's up to all nines
        out += [a[0] + p for p in _same_length(a[1:], "9" * n)]
        head += 1
    whole_top = b[1:] == "9" * n
    if head <= (top if whole_top else top - 1):   # first digits whose every tail is in range
        last = top if whole_top else top - 1
        out.append((str(head) if head == last else f"[{head}-{last}]") + "[0-9]" * n)
    if not whole_top:                        # b's first digit with tails from all zeros up to b's
        out += [b[0] + p for p in _same_length("0" * n, b[1:])]
    return out


def _resolve(ir: IR, op: str, verb: str) -> list[str]:
    pat = _pattern(op)
    if pat is None:
        if op not in ir.facts.info:
            raise _Reject(ir.facts.unknown_op(op))
        return [op]
    hits = _matches(ir.facts, op, pat)
    if not hits:
        raise _Reject(f"the pattern {_cut(op, 80)} matches no op (`*` matches any text, {{i}} any number, {{3..7}} a "
                      f"number in a range)")
    if verb in _SINGLE and len(hits) > 1:
        raise _Reject(f"{verb} takes one op, but the pattern {_cut(op, 80)} matches {len(hits)}: "
                      f"{', '.join(hits[:4])}{' ...' if len(hits) > 4 else ''}; name one")
    return hits


def _matches(facts, op: str, pat: tuple[int, str | None]) -> list[str]:
    """The ops a pattern matches, in graph order; the last few patterns' kept on the graph's facts (a
    batch of 1,000 edits may name the same pattern 1,000 times)."""
    kept = facts.__dict__.setdefault("_pattern_hits", {})
    hits = kept.get(op)
    if hits is None:
        fewest, source = pat
        longest = max(map(len, facts.ops), default=0)
        hits = []
        if fewest <= longest:       # a pattern longer than every name matches none, and is never compiled
            rx = re.compile(source if source is not None else _op_pattern(op, whole=True)[1], re.DOTALL)
            hits = [name for name in facts.ops if rx.fullmatch(name)]
        if len(op) <= 1000:
            if len(kept) >= 256:
                kept.clear()
            kept[op] = hits
    return list(hits)


class _State:
    def __init__(self, ir: IR):
        self.ir = ir
        self.facts = ir.facts
        self.knobs = ir.knobs.copy()
        self.fused = dict(ir.fused)
        self.impls = dict(ir.impls)


def _apply(st: _State, e: Edit) -> None:
    facts, k = st.facts, st.knobs
    if e.verb not in USAGE:
        raise _Reject(f"unknown verb {e.verb!r}; the edits are: {_usage_all()}")
    ops = _resolve(st.ir, e.op, e.verb)
    if e.verb == "tile":
        if not isinstance(e.n, int):
            raise _Reject(f"tile needs an integer size (`{USAGE['tile']}`)")
        for name in ops:
            msg = tile_problem(facts.info[name], e.n)
            if msg:
                raise _Reject(msg)
            k.tiles[name] = e.n
        total = task_count(facts, k)
        if total > MAX_TASKS:
            raise _Reject(f"tile size {e.n} for {e.op} would give the plan {total} tasks, over the limit of "
                          f"{MAX_TASKS}; use a larger tile size")
    elif e.verb == "split":
        for name in ops:
            msg = split_problem(facts, name, e.n)
            if msg:
                raise _Reject(msg)
            if e.n > 1 and name in st.impls:
                raise _Reject(f"{name} runs an impl body, and split parts run the generated one; `unimpl {name}` first")
            if e.n == 1:
                k.splits.pop(name, None)
            else:
                k.splits[name] = e.n
        total = task_count(facts, k)
        if total > MAX_TASKS:
            raise _Reject(f"split {e.n} for {e.op} would give the plan {total} tasks, over the limit of {MAX_TASKS}")
    elif e.verb in ("inflight", "ahead"):
        caps = k.inflight if e.verb == "inflight" else k.ahead
        for name in ops:
            msg = (inflight_problem if e.verb == "inflight" else ahead_problem)(facts.info[name], e.n)
            if msg:
                raise _Reject(msg)
            if e.n:
                caps[name] = e.n
            else:
                caps.pop(name, None)
        msg = inflight_rows_problem(facts, k)
        if msg:
            raise _Reject(msg)
    elif e.verb == "inline":
        for name in ops:
            msg = inline_problem(facts, st.fused, name, st.impls)
            if msg:
                raise _Reject(msg)
            st.fused[name] = INLINE
    elif e.verb == "assign":
        for name in ops:
            if e.sms is None:
                k.sms.pop(name, None)
                continue
            msg = sms_problem(name, e.sms[0], e.sms[1], k.num_sms)
            if msg:
                raise _Reject(msg)
            k.sms[name] = (e.sms[0], e.sms[1])
    elif e.verb == "order":
        _order(st, ops[0], e.where, e.other)
    elif e.verb == "counter":
        if e.mode not in COUNTER_MODES:
            raise _Reject(f"counter mode must be one of: {', '.join(COUNTER_MODES)}")
        for name in ops:
            k.counters[name] = e.mode
    elif e.verb == "prefetch":
        for name in ops:
            msg = prefetch_problem(facts.info[name], e.depth) if isinstance(e.depth, int) else \
                f"prefetch needs an integer depth (`{USAGE['prefetch']}`)"
            if msg:
                raise _Reject(msg)
            k.prefetch[name] = e.depth
    elif e.verb == "fuse":
        into = _resolve(st.ir, e.other or "", "fuse")
        for a in ops:
            # one consumer named: that one (fusion_problem says why not); a pattern: the op a feeds among its hits
            fed = into if len(into) == 1 else [b for b in into if b in facts.consumers.get(a, [])]
            if not fed:
                raise _Reject(f"cannot fuse {a}: it feeds none of the {len(into)} ops {e.other} matches "
                              f"({', '.join(into[:4])}{' ...' if len(into) > 4 else ''}); its consumers are "
                              f"{', '.join(facts.consumers.get(a, [])) or 'none'}")
            msg = fusion_problem(facts, st.fused, a, fed[0])
            if msg:
                raise _Reject(msg)
            st.fused[a] = fed[0]
    elif e.verb == "unfuse":
        for name in ops:
            into = [a for a, b in st.fused.items() if b == name]
            if name in st.fused:
                del st.fused[name]
            elif into:
                for a in into:
                    del st.fused[a]
            else:
                now = ", ".join(f"{a} into {b}" for a, b in st.fused.items()) or "none"
                raise _Reject(f"{name} is not fused, so there is nothing to unfuse (fusions now: {now})")
    elif e.verb == "impl":
        total = len(set(st.impls) | set(ops))
        if total > MAX_IMPL_OPS:
            raise _Reject(f"impl {_cut(e.op, 80)} names {len(ops)} ops, which would give {total} ops an impl body; at "
                          f"most {MAX_IMPL_OPS} may have one (each is compiled into the megakernel). Name fewer ops: "
                          f"one (`impl {ops[0]} <<<...>>>`), or a layer range such as `{{0..3}}`")
        msg = impl_problem(ops[0], e.code)    # the code's own checks, once for all the ops it goes to
        if msg:
            raise _Reject(msg)
        for name in ops:
            msg = impl_conflict(facts, k.splits, st.fused, name)
            if msg:
                raise _Reject(msg)
            st.impls[name] = e.code
    elif e.verb == "unimpl":
        for name in ops:
            if name not in st.impls:
                raise _Reject(f"{name} has no impl override; it already runs its generated task body")
            del st.impls[name]


def _order(st: _State, a: str, where: str, other: str) -> None:
    facts = st.facts
    if where not in ("before", "after"):
        raise _Reject(f"order takes `before` or `after` (`{USAGE['order']}`)")
    b = _resolve(st.ir, other, "order")[0]
    if a == b:
        raise _Reject(f"cannot order {a} {where} itself")
    rest = [x for x in st.knobs.order if x != a]
    rest.insert(rest.index(b) + (where == "after"), a)
    pos = {x: i for i, x in enumerate(rest)}
    f = facts.info[a]
    deps = sorted(f.deps, key=pos.__getitem__)
    cons = sorted(facts.consumers[a], key=pos.__getitem__)
    window = (f"after {deps[-1]}" if deps else "anywhere") + (f" and before {cons[0]}" if cons else "")
    for d in reversed(deps):
        if pos[d] > pos[a]:
            raise _Reject(f"order {a} {where} {b} would put {a} before {d}, which it depends on ({a} {f.why(d)}); "
                          f"an op must come after the ops it depends on, so {a} can go {window}")
    for c in cons:
        if pos[c] < pos[a]:
            raise _Reject(f"order {a} {where} {b} would put {a} after {c}, which depends on it ({c} "
                          f"{facts.info[c].why(a)}); {a} can go {window}")
    st.knobs.order = rest


def apply_edits(ir: IR, edits: str | list[Edit]) -> IR:
    """A new IR with the edits applied (text or Edit list); EditError and nothing applied if
    any edit is malformed or unsafe."""
    if isinstance(edits, str):
        edits = parse_edits(edits)
    if not isinstance(ir, LegalIR):
        raise EditError(f"apply_edits needs an IR, got {type(ir).__name__}")
    if not edits:
        return ir
    st = _State(ir)
    for i, e in enumerate(edits, 1):
        try:
            if not isinstance(e, Edit):
                raise _Reject(f"expected an Edit, got {type(e).__name__}")
            _apply(st, e)
        except _Reject as r:
            what = f"edit {i} (`{e.brief()}`)" if isinstance(e, Edit) else f"edit {i}"
            msg = str(r)
            raise EditError(f"{what}: {msg}{'' if msg.endswith(('.', '?')) else '.'} No edit was applied; the IR is "
                            "unchanged.", index=i,
                            edit=e if isinstance(e, Edit) else None) from None
    try:
        new = IR(ir.graph, st.knobs, st.fused, st.impls)
        new.plan()
    except ScheduleError as err:
        raise EditError(f"the edits give a schedule the validator rejects: {err}. No edit was applied; the IR is "
                        "unchanged.") from None
    except IRError as err:
        raise EditError(f"the edits give an invalid IR: {err}. No edit was applied; the IR is unchanged.") from None
    return new


def random_edit(ir: IR, rng) -> str:
    """One edit line of any verb but impl, on a random op, with random arguments (valid or not:
    the edit language refuses what it can tell is wrong, the validator the rest); `rng` a
    random.Random. What the validator's fuzz (tests/test_validate_fast.py) and bench/sim_speed.py
    send."""
    ops = ir.ops
    name = rng.choice(ops)
    info = ir.facts.info[name]
    verb = rng.choice(["tile", "assign", "assign", "order", "counter", "prefetch", "fuse", "inline", "split",
                       "inflight", "ahead"])
    n = ir.knobs.num_sms
    if verb == "tile":
        e = Edit(verb, name, n=rng.choice(info.allowed()))
    elif verb == "assign":
        lo = rng.randrange(n)
        e = Edit(verb, name, sms=(lo, rng.randrange(lo, n)))
    elif verb == "order":
        e = Edit(verb, name, where=rng.choice(["before", "after"]), other=rng.choice(ops))
    elif verb == "counter":
        e = Edit(verb, name, mode=rng.choice(["op", "tile"]))
    elif verb == "prefetch":
        e = Edit(verb, name, depth=rng.choice([0, 1, 2]))
    elif verb == "fuse":
        e = Edit(verb, name, other=rng.choice(ir.facts.consumers.get(name) or ops))
    elif verb == "inline":
        e = Edit(verb, name)
    elif verb in ("inflight", "ahead"):
        e = Edit(verb, name, n=rng.choice([0, 1, 2, 3]))
    else:
        e = Edit("split", name, n=rng.choice([2, 3, 4]))
    return e.to_text()   # spelled as the edit language spells an Edit


def apply_json(ir: IR, obj) -> IR:
    """`apply_edits` for the JSON form (a list of edit objects, one object, or a JSON string)."""
    return apply_edits(ir, edits_from_json(obj))


def sole_consumer(ir: IR, name: str, kinds: tuple[str, ...]) -> str | None:
    """The one op that consumes `name`'s output, if there is exactly one and its kind is in
    `kinds` (the fusions tuned_edits makes: a matmul into the elementwise op it feeds), else None."""
    cons = ir.facts.consumers.get(name, [])
    return cons[0] if len(cons) == 1 and ir.facts.info[cons[0]].op.kind in kinds else None


def tuned_edits(ir: IR) -> str:
    """The compiler's own schedule heuristics, spelled in the edit language (so an agent can read,
    keep or undo them), from what measured best on an H100 (bench/megakernel_edits.py):
    - fold each matmul whose sole consumer is an elementwise op into it (o_proj into the residual
      add, gate/up into silu_mul, down_proj into the add): one dependency hop less per fusion, and
      the elementwise tile is what the matmul tile would have written anyway;
    - fold each rope into its sole consumer (the k cache write, the attention): a few dozen flops
      instead of a hop;
    - one counter for an op that a norm reads, or that a matmul reads as its input vector (both
      read every tile): their tasks poll one counter instead of one per tile (measured on an H100:
      the op counter on silu_mul, read by down_proj, took 1677 -> 1640 us with one on q_proj).
    Edits the IR refuses are skipped, so any graph gets the subset that applies."""
    f = ir.facts
    kind = lambda n: f.info[n].op.kind  # noqa: E731
    lines = []
    sinks = {"matmul": ("elementwise",), "rope": ("cache_write", "decode_attention")}
    for name in ir.ops:
        into = sole_consumer(ir, name, sinks.get(kind(name), ()))
        if into:
            lines.append(f"fuse {name} into {into}")
    for name in ir.ops:
        cons = f.consumers.get(name, [])
        reads_all = any(kind(c) == "rmsnorm" or (kind(c) == "matmul" and f.info[c].op.inputs[0] == f.info[name].out_name)
                        for c in cons)
        if reads_all and name not in {ln.split()[1] for ln in lines}:
            lines.append(f"counter {name} op")
    try:
        apply_edits(ir, "\n".join(lines))
        return "\n".join(lines)
    except EditError:
        pass
    kept = []
    for line in lines:      # only when some edit is refused: keep those the IR takes
        try:
            apply_edits(ir, "\n".join(kept + [line]))
        except EditError:
            continue
        kept.append(line)
    return "\n".join(kept)


_LAYER_NUMBER = re.compile(r"(?<=\.)[0-9]+(?=\.)")


def layer_template(name: str) -> str:
    """An op name with its layer number (its first `.N.`) as `{i}`: `model.layers.3.mlp` ->
    `model.layers.{i}.mlp`; a name without one as it is."""
    return _LAYER_NUMBER.sub("{i}", name, count=1)


def compact_edits(ir: IR, text: str) -> str:
    """The same edits, shorter: lines that differ only in the layer number (an op name's first
    `.N.`) and are there for every layer of the IR become one line with `{i}`, in the place of the
    first of them. What a policy that writes edit text can learn to say for any depth of model
    (the IR text shows layers the same way, as `repeat i=...`). Text with an impl body is returned
    as it is; a line a pattern would widen (its template names more ops than the lines did) stays."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if any(ln.startswith("impl ") or "<<<" in ln for ln in lines):
        return text
    layers = {m.group(0) for n in ir.facts.ops for m in [_LAYER_NUMBER.search(n)] if m}
    template = lambda ln: " ".join(layer_template(w) for w in ln.split())  # noqa: E731
    groups: dict[str, list[str]] = {}
    for ln in lines:
        groups.setdefault(template(ln), []).append(ln)

    def whole(t: str, members: list[str]) -> bool:
        if len(members) < 2 or "{i}" not in t or t.startswith("order "):
            return False
        nums = {m.group(0) for ln in members for w in ln.split()[1:2] for m in [_LAYER_NUMBER.search(w)] if m}
        if nums != layers or len(members) != len(layers):
            return False
        try:                    # the pattern must name just the ops the lines named
            return sorted(_resolve(ir, t.split()[1], "tile")) == sorted(ln.split()[1] for ln in members)
        except _Reject:
            return False

    out, done = [], set()
    for ln in lines:
        t = template(ln)
        if whole(t, groups[t]):
            if t not in done:
                done.add(t)
                out.append(t)
        else:
            out.append(ln)
    return "\n".join(out)


__all__ = ["Edit", "EditError", "parse_edits", "format_edits", "apply_edits", "apply_json", "edits_to_json",
           "edits_from_json", "VERBS", "USAGE", "MAX_EDITS", "tuned_edits", "sole_consumer", "compact_edits",
           "layer_template", "random_edit"]
