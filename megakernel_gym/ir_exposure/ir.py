"""What the agent reads: the schedule IR as text, its parser, and task-level detail per op.

An `IR` is a captured `Graph` plus the schedule `Knobs` an agent edits, plus fusion groups
(`fused`: producer op -> the consumer it is fused into; handed to the compiler as
`Knobs.fused` when the plan is built) and task-body overrides (`impls`: op -> code text, which
the GPU codegen will compile in place of the built-in body). Everything else the text shows
(inputs, output shape, tile grid, the op-level dependency map) is derived from the graph. The rules
an IR must obey (facts, the `*_problem` checks, `normalize`) and the text-free IR are the compiler's
(`compiler/legality.py`); this module's `IR` adds `.text`, and an IR the compiler built (say
`calibrate.sample_schedules`) is rendered with `render(ir)`.

`render(ir)` gives the op-level text: one header line, then one line per op (views are folded
into their consumers' `in=`), in the knobs' queue-filling order, then one `impl` block per
overridden op. Runs of identical decoder layers print once as a `repeat` block, which keeps a
16-layer model within a few thousand tokens. `parse(text, graph)` accepts exactly the texts
`render` produces (so render(parse(x)) == x) and rejects anything else with a line-numbered
message. `render_op(ir, op)` gives one op's tasks: regions read and written, the counters
waited on, and the SM each runs on.

    mkir v1 model=llama-tiny sms=132 dtype=float32 tasks=266
    op embed embedding in=token_ids,embed.weight out=[2,64] grid=8x8 sms=0-131 counter=tile prefetch=0
    op layers.0.attn.norm rmsnorm in=embed,.norm.weight out=[2,64] grid=2x1 ... after=embed
"""
from __future__ import annotations

import re

from megakernel_gym.compiler.codegen import MAX_AHEAD, MAX_INFLIGHT
from megakernel_gym.compiler.graph import Graph
from megakernel_gym.compiler.legality import (MAX_IMPL_CHARS, MAX_PREFETCH, MAX_SMS, MAX_TASKS, GraphFacts, IRError,
                                              OpFacts, ahead_problem, facts_of, fusion_problem, impl_problem,
                                              inflight_problem, order_problem, prefetch_problem, sms_problem,
                                              split_problem, task_count, tile_problem)
from megakernel_gym.compiler.legality import IR as _LegalIR
from megakernel_gym.compiler.schedule import COUNTER_MODES, Knobs
from megakernel_gym.compiler.tasks import INLINE, MAX_SPLIT, input_boxes

FORMAT = "mkir v1"
MAX_TEXT_CHARS = 4_000_000

LEGEND = """\
IR text (mkir v1). Header: model, num SMs, the usual output dtype, the plan's task count.
One line per op, in the order its tasks fill the SM queues:
  op NAME KIND in=INPUTS out=[SHAPE] grid=TILESxSIZE sms=FIRST-LAST counter=tile|op prefetch=N split=P inflight=C
     ahead=A after=OPS into=OP
  in=     tensors read (views folded into the tensor they alias); ".x" is short for a name in the op's own
          scope (in layers.3.attn.q_proj, ".norm" is layers.3.attn.norm)
  out=    output shape (prefixed with the tensor's name when it is not the op's own, e.g. a KV cache)
  grid=   tiles x tile size along the tile axis: rows for norms/softmax/reduce, heads for rope/attention/
          cache writes, the last axis (columns) for matmul/elementwise/embedding. One task per tile.
  sms=    the SM range the op's tasks are dealt over; counter= one counter per tile, or one for the op
  prefetch= weight tiles loaded ahead; split= (attention) each tile's cached positions cut into P tasks, the last
          to finish combining them; inflight= (matmul) the weight ring's copies in flight while its weights
          stream; ahead= (matmul) the same while its task still waits for its inputs; after= ops whose tiles
          it waits on; into= the op it is fused into (into=*: computed on chip inside every consumer's task)
  repeat i=A..B ... end: the enclosed lines once per layer i (layers.{i-1} is the layer before)
  impl NAME <<<code>>>: the op's task body, replaced
"""

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A simple, tokenizer-free measure of prompt size: words and single punctuation marks."""
    return len(_TOKEN.findall(text))


class IRParseError(IRError):
    def __init__(self, line: int, message: str):
        self.line = line
        self.detail = message
        super().__init__(f"line {line}: {message}")


class IR(_LegalIR):
    """The compiler's IR (`compiler.legality.IR`: graph, knobs, fusions, task bodies, checked) with
    its text: `ir.text` is `render(ir)`, rendered once."""

    __slots__ = ("_text",)

    def __init__(self, graph: Graph, knobs: Knobs | None = None, fused: dict[str, str] | None = None,
                 impls: dict[str, str] | None = None, num_sms: int = 132):
        super().__init__(graph, knobs, fused, impls, num_sms)
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = render(self)
        return self._text


def make_ir(graph: Graph, knobs: Knobs | None = None, num_sms: int = 132) -> IR:
    """The IR of a graph under the given knobs (default knobs for `num_sms` SMs when None)."""
    return IR(graph, knobs, num_sms=num_sms)


# ---------------------------------------------------------------------------------------
# rendering


def _ref(scope: str, name: str) -> str:
    return "." + name[len(scope) + 1:] if scope and name.startswith(scope + ".") else name


def _shape(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def op_line(ir: IR, name: str) -> str:
    f = ir.facts.info[name]
    scope = name.rpartition(".")[0]
    ref = lambda t: _ref(scope, t)  # noqa: E731
    out = ("" if f.out_name == name else ref(f.out_name)) + _shape(f.out_shape)
    if f.out_dtype != ir.facts.dtype:
        out += ":" + f.out_dtype
    size = ir.tile(name)
    lo, hi = ir.sms(name)
    parts = ["op", name, f.op.kind, "in=" + ",".join(ref(ir.facts.b(t)) for t in f.op.inputs), "out=" + out,
             f"grid={f.extent // size}x{size}", f"sms={lo}-{hi}", f"counter={ir.knobs.counters.get(name, 'tile')}",
             f"prefetch={ir.knobs.prefetch.get(name, 0)}"]
    if ir.knobs.splits.get(name, 1) > 1:
        parts.append(f"split={ir.knobs.splits[name]}")
    if ir.knobs.inflight.get(name):
        parts.append(f"inflight={ir.knobs.inflight[name]}")
    if ir.knobs.ahead.get(name):
        parts.append(f"ahead={ir.knobs.ahead[name]}")
    if f.deps:
        parts.append("after=" + ",".join(ref(d) for d in f.deps))
    if name in ir.fused:
        parts.append("into=" + (INLINE if ir.fused[name] == INLINE else ref(ir.fused[name])))
    return " ".join(parts)


def header(ir: IR) -> str:
    return (f"{FORMAT} model={ir.graph.name} sms={ir.knobs.num_sms} dtype={ir.facts.dtype} "
            f"tasks={task_count(ir.facts, ir.knobs)}")


def render(ir: IR) -> str:
    """The op-level IR text (see the module docstring and LEGEND)."""
    lines = [header(ir)]
    lines += _compress([(n, op_line(ir, n)) for n in ir.knobs.order])
    for name, code in ir.impls.items():
        lines.append(f"impl {name} <<<{code}>>>")
    return "\n".join(lines) + "\n"


_UNIT = re.compile(r"^((?:[A-Za-z_]\w*\.)+?)(\d+)\.")


def _unit_of(name: str) -> tuple[str, int] | None:
    """The first numbered segment of an op name (layers.3.attn.q_proj -> ("layers.", 3))."""
    m = _UNIT.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def _template(lines: list[str], prefix: str, k: int) -> tuple[str, ...] | None:
    pat = re.compile(r"(?<![\w.])" + re.escape(prefix) + r"(\d+)(?=\.)")

    def sub(m):
        i = int(m.group(1))
        return prefix + ("{i}" if i == k else "{i-1}" if i == k - 1 else m.group(1))
    if any("{" in ln or "}" in ln for ln in lines):
        return None
    return tuple(pat.sub(sub, ln) for ln in lines)


def _compress(op_lines: list[tuple[str, str]]) -> list[str]:
    """Fold runs of consecutive layers whose lines are equal up to the layer number into
    `repeat i=A..B` blocks (a run of one layer stays as it is)."""
    units: list[tuple[tuple[str, int] | None, list[str]]] = []
    for name, line in op_lines:
        key = _unit_of(name)
        if key is not None and units and units[-1][0] == key:
            units[-1][1].append(line)
        else:
            units.append((key, [line]))
    out: list[str] = []
    i = 0
    while i < len(units):
        key, lines = units[i]
        if key is None:
            out += lines
            i += 1
            continue
        tmpl = _template(lines, *key)
        j = i + 1
        while tmpl is not None and j < len(units):
            k2 = units[j][0]
            if k2 is None or k2[0] != key[0] or k2[1] != key[1] + (j - i) or \
                    _template(units[j][1], *k2) != tmpl:
                break
            j += 1
        if j - i >= 2:
            out.append(f"repeat i={key[1]}..{key[1] + j - i - 1}")
            out += ["  " + ln for ln in tmpl]
            out.append("end")
        else:
            out += lines
        i = j
    return out


# ---------------------------------------------------------------------------------------
# parsing


_HEADER = re.compile(r"^mkir v1 model=(\S+) sms=(\d{1,9}) dtype=(\S+) tasks=(\d{1,9})$")
_REPEAT = re.compile(r"^repeat i=(\d{1,6})\.\.(\d{1,6})$")
_FIELD = re.compile(r"^([a-z]+)=(.*)$")
_KNOB_FIELDS = ("grid", "sms", "counter", "prefetch")
_ALL_FIELDS = ("in", "out", "grid", "sms", "counter", "prefetch", "split", "inflight", "ahead", "after", "into")


def _number_field(err, name: str, fields: dict[str, str], key: str, allowed: str, problem) -> int:
    """An op line's numeric knob field: digits (else an error naming the `allowed` range), then what
    `problem(n)` objects to, if anything, as the error (`err` makes the line's IRParseError)."""
    value = fields[key]
    if not re.fullmatch(r"\d{1,9}", value):
        raise err(f"op {name}: {key}= must be a number {allowed}, got {_show(value)}")
    msg = problem(int(value))
    if msg:
        raise err(msg)
    return int(value)


def parse(text: str, graph: Graph | IR) -> IR:
    """The IR that `text` (as `render` writes it) describes, over `graph` (or an IR's graph).

    Only the knobs are read from the text (header sms, grid, sms, counter, prefetch, split, inflight, ahead, into, the
    line order, impl blocks); every other field is derived from the graph and must match it.
    Raises IRParseError naming the line and what is allowed; never returns a different text's IR.
    """
    g = graph.graph if isinstance(graph, _LegalIR) else graph
    if not isinstance(text, str):
        raise IRParseError(1, f"the IR text must be a string, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise IRParseError(1, f"the IR text is {len(text)} characters, over the limit of {MAX_TEXT_CHARS}")
    facts = facts_of(g)
    raw = text.split("\n")
    if not text.strip():
        raise IRParseError(1, f"the IR text is empty; it starts with a header line like `{FORMAT} model={g.name} ...`")
    m = _HEADER.match(raw[0])
    if not m:
        raise IRParseError(1, f"expected the header `{FORMAT} model=NAME sms=N dtype=DTYPE tasks=N`, "
                              f"got {_show(raw[0])}")
    if m.group(1) != g.name:
        raise IRParseError(1, f"this IR is for model {m.group(1)!r} but the graph given is {g.name!r}")
    num_sms = int(m.group(2))
    if not 1 <= num_sms <= MAX_SMS:
        raise IRParseError(1, f"sms={num_sms} is out of range; allowed: 1-{MAX_SMS}")

    # -- op lines (repeat blocks expanded) and impl blocks
    entries: list[tuple[int, str, str]] = []     # (line number, op line, where)
    impls: dict[str, str] = {}
    impl_line: dict[str, int] = {}
    i = 1
    n_lines = len(raw)
    repeat: tuple[int, int, int] | None = None   # (line, first i, last i)
    body: list[tuple[int, str]] = []
    while i < n_lines:
        ln, line = i + 1, raw[i]
        if i == n_lines - 1 and line == "":
            break
        if repeat is not None:
            if line == "end":
                if not body:
                    raise IRParseError(ln, "empty repeat block")
                if (repeat[2] - repeat[1] + 1) * len(body) > len(facts.ops):
                    raise IRParseError(repeat[0], f"repeat i={repeat[1]}..{repeat[2]} expands to more op lines than "
                                                  f"the model has ops ({len(facts.ops)})")
                for k in range(repeat[1], repeat[2] + 1):
                    for bl, tl in body:
                        entries.append((bl, tl.replace("{i-1}", str(k - 1)).replace("{i}", str(k)),
                                        f" (repeat i={k})"))
                repeat, body = None, []
            elif line.startswith("  op "):
                body.append((ln, line[2:]))
            else:
                raise IRParseError(ln, f"inside a repeat block (opened on line {repeat[0]}) expected an indented op "
                                       f"line `  op ...` or `end`, got {_show(line)}")
            i += 1
            continue
        if line.startswith("op "):
            if impls:
                raise IRParseError(ln, "op lines come before the impl blocks")
            entries.append((ln, line, ""))
        elif line.startswith("repeat"):
            rm = _REPEAT.match(line)
            if not rm or int(rm.group(1)) >= int(rm.group(2)):
                raise IRParseError(ln, f"expected `repeat i=FIRST..LAST` with FIRST < LAST, got {_show(line)}")
            if impls:
                raise IRParseError(ln, "repeat blocks come before the impl blocks")
            repeat = (ln, int(rm.group(1)), int(rm.group(2)))
        elif line.startswith("impl "):
            head, sep, _ = line.partition("<<<")
            name = head[5:].strip()
            if not sep or not name or " " in name:
                raise IRParseError(ln, f"expected `impl OP <<<code>>>`, got {_show(line)}")
            start = sum(len(r) + 1 for r in raw[:i]) + len(head) + 3
            end = text.find(">>>", start)
            if end < 0:
                raise IRParseError(ln, f"the impl block of {name} is never closed with >>>")
            code = text[start:end]
            if name not in facts.info:
                raise IRParseError(ln, facts.unknown_op(name))
            if name in impls:
                raise IRParseError(ln, f"a second impl block for {name} (the first is on line {impl_line[name]})")
            impls[name], impl_line[name] = code, ln
            i += code.count("\n")
            line_end = text.find("\n", end)
            rest = text[end + 3:line_end if line_end >= 0 else len(text)]
            if rest:
                raise IRParseError(i + 1, f"unexpected text after >>>: {_show(rest)}")
        elif line == "end":
            raise IRParseError(ln, "`end` without a `repeat` before it")
        else:
            raise IRParseError(ln, f"expected an op line (`op NAME KIND ...`), a `repeat` block or an `impl` block, "
                                   f"got {_show(line)}")
        i += 1
    if repeat is not None:
        raise IRParseError(repeat[0], "repeat block is never closed with `end`")

    # -- knobs from the op lines
    knobs = Knobs(num_sms=num_sms)
    fused: dict[str, str] = {}
    line_of: dict[str, int] = {}
    for ln, line, where in entries:
        err = lambda msg: IRParseError(ln, msg + where)  # noqa: E731
        parts = line.split(" ")
        if "" in parts:
            raise err("fields are separated by single spaces, with none at the start or end of the line")
        if len(parts) < 3:
            raise err(f"expected `op NAME KIND field=value ...`, got {_show(line)}")
        name = parts[1]
        if name not in facts.info:
            raise err(facts.unknown_op(name))
        if name in line_of:
            raise err(f"op {name} appears twice (first on line {line_of[name]}); every op has one line")
        line_of[name] = ln
        f = facts.info[name]
        fields: dict[str, str] = {}
        for p in parts[3:]:
            fm = _FIELD.match(p)
            if not fm or fm.group(1) not in _ALL_FIELDS:
                raise err(f"op {name}: unexpected {_show(p)}; the fields are {', '.join(k + '=' for k in _ALL_FIELDS)}")
            if fm.group(1) in fields:
                raise err(f"op {name}: field {fm.group(1)}= given twice")
            fields[fm.group(1)] = fm.group(2)
        missing = [k for k in _KNOB_FIELDS if k not in fields]
        if missing:
            raise err(f"op {name}: missing {', '.join(k + '=' for k in missing)}")
        gm = re.fullmatch(r"(\d{1,9})x(\d{1,9})", fields["grid"])
        if not gm:
            raise err(f"op {name}: grid= must be TILESxSIZE (e.g. grid=8x8), got {_show(fields['grid'])}")
        count, size = int(gm.group(1)), int(gm.group(2))
        msg = tile_problem(f, size)
        if msg:
            raise err(msg)
        if count * size != f.extent:
            raise err(f"op {name}: grid={fields['grid']} does not cover its extent {f.extent}: with tile size {size} "
                      f"the grid is {f.extent // size}x{size}")
        knobs.tiles[name] = size
        sm = re.fullmatch(r"(\d{1,9})-(\d{1,9})", fields["sms"])
        if not sm:
            raise err(f"op {name}: sms= must be FIRST-LAST (e.g. sms=0-{num_sms - 1}), got {_show(fields['sms'])}")
        msg = sms_problem(name, int(sm.group(1)), int(sm.group(2)), num_sms)
        if msg:
            raise err(msg)
        knobs.sms[name] = (int(sm.group(1)), int(sm.group(2)))
        if fields["counter"] not in COUNTER_MODES:
            raise err(f"op {name}: counter= must be one of {', '.join(COUNTER_MODES)}, got {_show(fields['counter'])}")
        knobs.counters[name] = fields["counter"]
        knobs.prefetch[name] = _number_field(err, name, fields, "prefetch", f"0-{MAX_PREFETCH}",
                                             lambda n: prefetch_problem(f, n))
        if "split" in fields:
            knobs.splits[name] = _number_field(err, name, fields, "split", f"2-{MAX_SPLIT}",
                                               lambda n: split_problem(facts, name, n))
        if "inflight" in fields:
            knobs.inflight[name] = _number_field(err, name, fields, "inflight", f"1-{MAX_INFLIGHT}",
                                                 lambda n: inflight_problem(f, n))
        if "ahead" in fields:
            knobs.ahead[name] = _number_field(err, name, fields, "ahead", f"1-{MAX_AHEAD}",
                                              lambda n: ahead_problem(f, n))
        if fields.get("into") == INLINE:
            fused[name] = INLINE
        elif "into" in fields:
            v = fields["into"]
            target = name.rpartition(".")[0] + v if v.startswith(".") else v
            if target not in facts.info:
                raise err(f"op {name}: into= names no op ({_show(v)})")
            msg = fusion_problem(facts, {}, name, target)
            if msg:
                raise err(msg)
            fused[name] = target
        knobs.order.append(name)
    missing = [n for n in facts.ops if n not in line_of]
    if missing:
        last = entries[-1][0] if entries else 1
        raise IRParseError(last, f"no line for op(s) {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")
                           + f"; every one of the {len(facts.ops)} ops has exactly one line")
    try:
        ir = IR(g, knobs, fused, impls)
    except IRError as e:
        bad = order_problem(facts, knobs.order)
        ln = line_of.get(bad[0], 1) if bad else 1
        for name, code in impls.items():
            if impl_problem(name, code):
                ln = impl_line[name]
        raise IRParseError(ln, str(e)) from None

    # -- everything derived must match what the graph gives
    want = render(ir)
    if want != text:
        got_lines, want_lines = text.split("\n"), want.split("\n")
        for k, (a, b) in enumerate(zip(got_lines, want_lines)):
            if a != b:
                raise IRParseError(k + 1, f"this line does not match what the graph and its knobs give: expected "
                                          f"{_show(b)}, got {_show(a)} (only grid, sms, counter, prefetch, into, the "
                                          "op order and impl blocks can differ from the rendered IR)")
        k = min(len(got_lines), len(want_lines))
        raise IRParseError(k, "the IR text " + ("ends early" if len(got_lines) < len(want_lines) else
                                                "has extra text at the end") + " (it ends with a single newline)")
    ir._text = want
    return ir


def _show(s: str, limit: int = 160) -> str:
    return "`" + (s if len(s) <= limit else s[:limit] + "...") + "`"


# ---------------------------------------------------------------------------------------
# task-level detail for one op


def _box(shape, box) -> str:
    return "[" + ",".join(":" if (lo, hi) == (0, d) else f"{lo}:{hi}" for (lo, hi), d in zip(box, shape)) + "]"


def render_op(ir: IR, op: str) -> str:
    """One op's tasks, from the plan: for each tile, the SM and queue slot it runs in, the boxes
    it reads and writes (per-dim lo:hi, `:` for a whole dim; a view shows the tensor it aliases
    and the view's shape), the counters it waits on (name>=threshold) and the counter it bumps."""
    facts = ir.facts
    if op not in facts.info:
        raise IRError(facts.unknown_op(op))
    plan = ir.plan()
    tg, g = plan.tg, ir.graph
    f = facts.info[op]
    slot = {t: (s, i) for s, q in enumerate(plan.queues) for i, t in enumerate(q)}
    bumps = plan.counter_of_task()
    cname = {c.id: c.name for c in plan.counters}
    axis, extent, size = tg.tiling[op]

    def tensor(t: str) -> str:
        b = facts.b(t)
        return b if b == t else f"{b}.view({','.join(map(str, g.tensors[t].shape))})"
    lines = [op_line(ir, op),
             f"tasks={len(tg.by_op[op])} axis={axis} extent={extent} tile={size}"
             + (f" split={ir.knobs.splits[op]}" if ir.knobs.splits.get(op, 1) > 1 else "") + " counters="
             + ("one per tile" if ir.knobs.counters.get(op, "tile") == "tile" else "one for the op")]
    for tid in tg.by_op[op]:
        task = tg.tasks[tid]
        obox = tuple((task.tile * size, (task.tile + 1) * size) if i == axis else (0, d)
                     for i, d in enumerate(f.out_shape))
        reads = " ".join(tensor(t) + _box(g.tensors[t].shape, box) for t, box in input_boxes(f.op, g, obox))
        writes = " ".join(tensor(o) + (_box(f.out_shape, obox) if tuple(g.tensors[o].shape) == f.out_shape
                                       else _box(g.tensors[o].shape, tuple((0, d) for d in g.tensors[o].shape)))
                          for o in f.op.outputs)
        waits = ",".join(f"{cname[c]}>={thr}" for c, thr in plan.waits.get(tid, [])) or "-"
        bump = ",".join(cname[c] for c in bumps.get(tid, [])) or "-"
        s, q = slot[tid]
        lines.append(f"task {tid} tile={task.tile}{f' part={task.part}' if task.parts > 1 else ''} sm={s} slot={q} reads={reads} writes={writes} waits={waits} "
                     f"bumps={bump}")
    if op in ir.impls:
        lines.append(f"impl {op} <<<{ir.impls[op]}>>>")
    return "\n".join(lines) + "\n"


__all__ = ["IR", "IRError", "IRParseError", "GraphFacts", "OpFacts", "make_ir", "render", "parse", "render_op",
           "op_line", "count_tokens", "facts_of", "LEGEND", "FORMAT", "MAX_TASKS", "MAX_PREFETCH", "MAX_SMS",
           "MAX_IMPL_CHARS"]
