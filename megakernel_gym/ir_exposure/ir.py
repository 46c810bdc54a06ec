"""What the agent reads: the schedule IR as text, its parser, and task-level detail per op.

An `IR` is a captured `Graph` plus the schedule `Knobs` an agent edits, plus fusion groups
(`fused`: producer op -> the consumer it is fused into; handed to the compiler as
`Knobs.fused` when the plan is built) and task-body overrides (`impls`: op -> code text, which
the GPU codegen will compile in place of the built-in body). Everything else the text shows
(inputs, output shape, tile grid, the op-level dependency map) is derived from the graph.

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

import math

import difflib
import re
from collections import Counter as _Tally
from dataclasses import dataclass

from megakernel_gym.compiler.codegen import MAX_AHEAD, MAX_INFLIGHT
from megakernel_gym.compiler.graph import Graph, Op
from megakernel_gym.compiler.schedule import COUNTER_MODES, Knobs, Plan, build_plan
from megakernel_gym.compiler.tasks import (INLINE, MAX_SPLIT, TilingError, allowed_tiles, default_tile, input_boxes,
                                           tile_axis, tile_group)
from megakernel_gym.compiler.validate import ScheduleError, check

FORMAT = "mkir v1"
MAX_SMS = 1024            # largest chip the header may name
MAX_PREFETCH = 8          # weight tiles an op may load ahead of its current one
RING_ROWS = 1 << 16       # a ring call's rows, where any op has its own cap (the stream's rows word keeps 16 bits)
MAX_TASKS = 65536         # all ops' tiles together: a 28-32-layer model's default is 35-40k; keeps planning to seconds
MAX_IMPL_CHARS = 20000    # one op's task-body override
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


class IRError(ValueError):
    """An IR that cannot be built (bad knobs, unknown op); the message says what is allowed."""


class IRParseError(IRError):
    def __init__(self, line: int, message: str):
        self.line = line
        self.detail = message
        super().__init__(f"line {line}: {message}")


# ---------------------------------------------------------------------------------------
# facts derived from the graph once


_DEP_WHY = {"raw": "reads {p}'s output", "war": "overwrites a tensor {p} reads",
            "waw": "overwrites a tensor {p} writes"}


@dataclass
class OpFacts:
    op: Op
    axis: int
    extent: int
    group: int                  # tile sizes must be multiples of this
    out_name: str
    out_shape: tuple[int, ...]
    out_dtype: str
    reads_weight: bool
    deps: dict[str, str]        # op it must follow -> "raw" | "war" | "waw", graph order

    @property
    def name(self) -> str:
        return self.op.name

    def allowed(self) -> list[int]:
        return allowed_tiles(self.op, self.extent, self.group)

    def nearest_allowed(self, want: float) -> int:
        """The allowed tile size nearest `want` in ratio (the smaller one on a tie)."""
        return min(self.allowed(), key=lambda t: (abs(math.log(t / want)), t))

    def why(self, dep: str) -> str:
        return _DEP_WHY[self.deps[dep]].format(p=dep)


class GraphFacts:
    """Per non-view op: tiling extent, output, and the op-level dependency map.

    Dependencies are computed on whole base tensors (views resolved), in program order:
    read-after-write, write-after-read and write-after-write. They are a superset of the
    tile-level dependencies `lower` derives, which is what an op order must respect.
    """

    def __init__(self, g: Graph):
        self.graph = g
        self.base: dict[str, str] = {}
        for op in g.ops:
            if op.kind == "view":
                self.base[op.outputs[0]] = self.base.get(op.inputs[0], op.inputs[0])
        self.ops: list[str] = []
        self.info: dict[str, OpFacts] = {}
        last_writer: dict[str, str] = {}
        readers: dict[str, list[str]] = {}
        position: dict[str, int] = {}
        for op in g.ops:
            if op.kind == "view":
                continue
            out = op.outputs[0]
            shape = tuple(g.tensors[out].shape)
            axis = tile_axis(op, shape)
            reads = [self.b(t) for t in op.inputs]
            writes = [self.b(t) for t in op.outputs]
            deps: dict[str, str] = {}
            for t in writes:
                for r in readers.get(t, []):
                    deps.setdefault(r, "war")
                if t in last_writer:
                    deps.setdefault(last_writer[t], "waw")
            for t in reads:
                if t in last_writer:
                    deps[last_writer[t]] = "raw"
            deps.pop(op.name, None)
            deps = dict(sorted(deps.items(), key=lambda kv: position[kv[0]]))
            for t in reads:
                readers.setdefault(t, []).append(op.name)
            for t in writes:
                last_writer[t] = op.name
                readers[t] = []
            position[op.name] = len(self.ops)
            self.ops.append(op.name)
            self.info[op.name] = OpFacts(
                op=op, axis=axis, extent=shape[axis] if shape else 1, group=tile_group(op, g), out_name=out,
                out_shape=shape, out_dtype=g.tensors[out].dtype,
                reads_weight=any(g.tensors[t].kind == "weight" for t in reads), deps=deps)
        self.consumers: dict[str, list[str]] = {n: [] for n in self.ops}
        for n in self.ops:
            for d in self.info[n].deps:
                self.consumers[d].append(n)
        # what must still be in memory after the step: its outputs and the state it updates
        self.state = {self.b(t) for t in g.outputs} | {self.b(t) for t in g.written_buffers()}
        tally = _Tally(f.out_dtype for f in self.info.values())
        self.dtype = max(sorted(tally), key=lambda d: tally[d]) if tally else "float32"

    def b(self, tensor: str) -> str:
        return self.base.get(tensor, tensor)

    def unknown_op(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.ops, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else \
            f"; ops look like {self.ops[min(1, len(self.ops) - 1)]} (the names at the start of the IR's op lines)"
        view = next((o for o in self.graph.ops if o.name == name and o.kind == "view"), None)
        if view is not None:
            return (f"{name} is a view, which costs no task and takes no knobs; its consumers read "
                    f"{self.b(view.outputs[0])} directly")
        return f"no op named {name!r}{hint}"


_FACTS_CACHE: list[tuple[Graph, GraphFacts]] = []


def facts_of(g: Graph) -> GraphFacts:
    for graph, f in _FACTS_CACHE:
        if graph is g:
            return f
    f = GraphFacts(g)
    _FACTS_CACHE.append((g, f))
    del _FACTS_CACHE[:-8]
    return f


# ---------------------------------------------------------------------------------------
# knob rules, shared by the parser, the IR constructor and the edit language


def tile_problem(f: OpFacts, n: int) -> str | None:
    if n >= 1 and n <= f.extent and f.extent % n == 0 and n % f.group == 0:
        return None
    shape = "[" + ",".join(map(str, f.out_shape)) + "]"
    if n < 1 or n > f.extent:
        why = f"tile size {n} does not fit {f.name}'s extent {f.extent} (axis {f.axis} of its output {shape})"
    elif f.extent % n:
        why = f"tile size {n} does not divide {f.name}'s extent {f.extent} (axis {f.axis} of its output {shape})"
    else:
        why = (f"tile size {n} would split a group of {f.group} query heads that share one kv head in "
               f"{f.name}; a tile must cover whole groups (multiples of {f.group})")
    return f"{why}; allowed sizes: {', '.join(map(str, f.allowed()))}"


def split_problem(facts: "GraphFacts", name: str, n) -> str | None:
    f = facts.info[name]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SPLIT:
        return f"split {n!r} for {name} is out of range; allowed: 1-{MAX_SPLIT} parts"
    if n == 1:
        return None
    from megakernel_gym.compiler.codegen import attention_split_problem
    msg = attention_split_problem(facts.graph, f.op)
    return f"cannot split {name}: {msg}" if msg else None


def impl_conflict(facts: "GraphFacts", splits: dict[str, int], fused: dict[str, str], name: str) -> str | None:
    """Why op `name` cannot run an impl body with these splits and fusions (its split parts and the
    norms inlined into it need the generated body), or None."""
    if splits.get(name, 1) > 1:
        return f"{name} is split into {splits[name]} parts, which run the generated body; `split {name} n=1` first"
    inlined = [a for a, c in fused.items() if c == INLINE and name in facts.consumers.get(a, [])]
    if inlined:
        return f"{name} computes the inlined {inlined[0]} on chip, which an impl body cannot; `unfuse {inlined[0]}` first"
    return None


def inline_problem(facts: "GraphFacts", fused: dict[str, str], a: str, impls: dict[str, str] | None = None) -> str | None:
    """Why `a` cannot be computed inside every consumer's task on chip (`inline`), or None."""
    from megakernel_gym.compiler.codegen import onchip_norm_problem
    f = facts.info[a]
    if a in fused:
        return f"{a} is already fused into {fused[a]}; unfuse it first (`unfuse {a}`)"
    if facts.b(f.out_name) in facts.state:
        return (f"cannot inline {a}: it writes {f.out_name}, which the step must leave in memory (a model output or "
                "state such as a KV cache)")
    into = [p for p, c in fused.items() if c == a]
    if into:
        return f"cannot inline {a}: {', '.join(into)} is fused into it; unfuse that first"
    cons = facts.consumers[a]
    if not cons:
        return f"cannot inline {a}: no op reads its output"
    for c in cons:
        msg = onchip_norm_problem(facts.graph, f.op, facts.info[c].op)
        if msg:
            return f"cannot inline {a} into its consumer {c}: {msg}"
        if c in (impls or {}):
            return f"cannot inline {a}: its consumer {c} runs an impl body, which reads {a}'s output from memory"
    return None


def sms_problem(name: str, lo: int, hi: int, num_sms: int) -> str | None:
    if lo > hi:
        return f"SM range {lo}-{hi} for {name} is empty: the first SM must not be after the last"
    if lo < 0 or hi >= num_sms:
        return (f"SM range {lo}-{hi} for {name} is outside the chip: this IR has {num_sms} SMs, numbered "
                f"0-{num_sms - 1}")
    return None


def _ring_cap_problem(verb: str, f: OpFacts, n, hi: int, zero: str, when: str, example: str) -> str | None:
    """Why `VERB OP n=N`, a cap on the weight ring's copies in flight, cannot hold: N out of 0-hi
    (0: `zero`), or an op whose weights the ring does not stream (only matmuls')."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= hi:
        return f"{verb} {n!r} for {f.name} is out of range; allowed: 1-{hi} copies, 0 for {zero}"
    if n and f.op.kind != "matmul":
        return (f"{f.name} ({f.op.kind}) streams no weight through the ring; {verb} caps the copies in flight "
                f"while a matmul's weights stream{when} (name the matmul, e.g. `{example}`)")
    return None


def inflight_problem(f: OpFacts, n) -> str | None:
    """Why `inflight OP n=N` cannot hold (0 takes the compiler's cap back)."""
    return _ring_cap_problem("inflight", f, n, MAX_INFLIGHT, "the compiler's own", "",
                             "inflight layers.*.attn.o_proj n=1")


def ahead_problem(f: OpFacts, n) -> str | None:
    """Why `ahead OP n=N` cannot hold (0: no cap of its own while its task waits)."""
    return _ring_cap_problem("ahead", f, n, MAX_AHEAD, "none of its own", " before its task has its inputs",
                             "ahead layers.*.mlp.gate_proj n=1")


def inflight_rows_problem(facts: "GraphFacts", knobs: Knobs) -> str | None:
    """With any op's own cap, every op's tile must stay under RING_ROWS rows (the codegen keeps a
    ring call's caps beside its rows in one word, and a fused matmul streams its consumer's tile)."""
    if not knobs.inflight and not knobs.ahead:
        return None
    for name in facts.ops:
        if tile_size(facts, knobs, name) >= RING_ROWS:
            return (f"{name}'s tile of {tile_size(facts, knobs, name)} rows is too long while an op has its own "
                    f"inflight cap (at most {RING_ROWS - 1} rows a tile): tile {name} smaller first")
    return None


def prefetch_problem(f: OpFacts, depth: int) -> str | None:
    if not 0 <= depth <= MAX_PREFETCH:
        return f"prefetch depth {depth} for {f.name} is out of range; allowed depths: 0-{MAX_PREFETCH}"
    if depth and not f.reads_weight:
        return (f"{f.name} ({f.op.kind}) reads no weight, and prefetch loads weight tiles ahead; only ops that "
                "read a weight (matmul, norms with a weight, embedding) take a prefetch depth above 0")
    return None


def fusion_problem(facts: GraphFacts, fused: dict[str, str], a: str, b: str) -> str | None:
    if a == b:
        return f"cannot fuse {a} into itself"
    if a in fused:
        return f"{a} is already fused into {fused[a]}; unfuse it first (`unfuse {a}`)"
    if fused.get(b) == INLINE:
        return f"cannot fuse {a} into {b}: {b} is inlined into its consumers, which compute it from its inputs"
    cons = facts.consumers[a]
    if facts.info[a].op.kind == "decode_attention":
        # each of the consumer's tiles would run the whole attention again over its caches (the tiles
        # together read the caches once per tile), and the generated kernel computed NaN for it on an
        # H100 (attention into o_proj: 1,727 us and NaN against the expert's 977 us)
        return (f"cannot fuse {a} into {b}: a decode_attention is not fused into its consumer (every tile of "
                f"{b} would recompute the whole attention over the KV caches); split it instead "
                f"(`split {a} n=4`) or fuse its producers into it")
    if facts.b(facts.info[a].out_name) in facts.state and not _writes_through(facts, a, b):
        return (f"cannot fuse {a} into {b}: {a} writes {facts.info[a].out_name}, which the step must leave in "
                "memory (a model output or state such as a KV cache), so it cannot be folded into another op"
                " (a cache_write can be fused only into the decode_attention that reads the cache)")
    if b not in cons:
        hint = f"; its only consumer is {cons[0]} (`fuse {a} into {cons[0]}`)" if len(cons) == 1 else ""
        return f"cannot fuse {a} into {b}: {b} does not depend on {a} (fuse a producer into its consumer){hint}"
    if len(cons) > 1:
        others = [c for c in cons if c != b]
        return (f"cannot fuse {a} into {b}: {', '.join(others)} also depend{'s' if len(others) == 1 else ''} on {a}, "
                f"and fusing {a} away would break that dependency; an op can be fused only into its sole consumer")
    seen, c = set(), b
    while c in fused and c not in seen:
        seen.add(c)
        c = fused[c]
        if c == a:
            return f"cannot fuse {a} into {b}: {b} is already fused into {a}, which would make a cycle"
    return None


def _writes_through(facts: GraphFacts, a: str, b: str) -> bool:
    """Whether fusing state writer `a` into `b` still leaves the state in memory: a cache_write
    fused into the decode_attention reading its cache runs as a prologue call of each attention
    task, which stores the step's row to the cache before the attention reads it (then from that
    SM, so the attention waits for the k/v projections, not for a cache-write task). The
    attention's tiles together read every kv head, so every row the write owns is written (by
    each split part of a tile: the same values)."""
    return facts.info[a].op.kind == "cache_write" and facts.info[b].op.kind == "decode_attention"


def order_problem(facts: GraphFacts, order: list[str]) -> tuple[str, str] | None:
    """(op, message) for the first op the order puts before an op it depends on."""
    pos = {n: i for i, n in enumerate(order)}
    for n in order:
        f = facts.info[n]
        for d in f.deps:
            if pos[d] > pos[n]:
                return n, (f"{n} comes before {d}, but it depends on {d} ({n} {f.why(d)}): every op must come "
                           f"after the ops it depends on")
    return None


def task_count(facts: GraphFacts, knobs: Knobs) -> int:
    return sum(facts.info[n].extent // tile_size(facts, knobs, n) * knobs.splits.get(n, 1) for n in facts.ops)


def wave_tile(facts: GraphFacts, names: list[str], num_sms: int) -> int | None:
    """The smallest tile size every op in `names` allows that gives them at most one task per SM
    together (one wave for sibling matmuls such as q/k/v), or None."""
    allowed = set.intersection(*(set(facts.info[n].allowed()) for n in names))
    for t in sorted(allowed):
        if sum(facts.info[n].extent // t for n in names) <= num_sms:
            return t
    return None


def tile_size(facts: GraphFacts, knobs: Knobs, name: str) -> int:
    f = facts.info[name]
    return knobs.tiles.get(name) or default_tile(f.op, f.extent, knobs.num_sms, f.group)


def normalize(facts: GraphFacts, knobs: Knobs, fused: dict[str, str], impls: dict[str, str]):
    """Check every knob against the graph; return canonical copies (defaults left implicit) or
    raise _KnobError naming the op at fault."""
    if not isinstance(knobs.num_sms, int) or not 1 <= knobs.num_sms <= MAX_SMS:
        raise _KnobError(None, f"num_sms must be an integer in 1-{MAX_SMS}, got {knobs.num_sms!r}")
    k = Knobs(num_sms=knobs.num_sms)
    for name in list(knobs.tiles) + list(knobs.sms) + list(knobs.counters) + list(knobs.prefetch) \
            + list(knobs.splits) + list(knobs.inflight) + list(knobs.ahead) + list(fused) + [v for v in fused.values() if v != INLINE] \
            + list(impls):
        if name not in facts.info:
            raise _KnobError(None, facts.unknown_op(name))
    for name, n in knobs.tiles.items():
        f = facts.info[name]
        msg = tile_problem(f, n) if isinstance(n, int) else f"tile size for {name} must be an integer, got {n!r}"
        if msg:
            raise _KnobError(name, msg)
        if n != default_tile(f.op, f.extent, k.num_sms, f.group):
            k.tiles[name] = n
    for name, rng in knobs.sms.items():
        lo, hi = rng
        msg = sms_problem(name, lo, hi, k.num_sms)
        if msg:
            raise _KnobError(name, msg)
        if (lo, hi) != (0, k.num_sms - 1):
            k.sms[name] = (lo, hi)
    for name, mode in knobs.counters.items():
        if mode not in COUNTER_MODES:
            raise _KnobError(name, f"counter mode {mode!r} for {name} is not one of: {', '.join(COUNTER_MODES)}")
        if mode != "tile":
            k.counters[name] = mode
    for name, n in knobs.splits.items():
        msg = split_problem(facts, name, n)
        if msg:
            raise _KnobError(name, msg)
        if n != 1:
            k.splits[name] = n
    for name, depth in knobs.prefetch.items():
        msg = prefetch_problem(facts.info[name], depth) if isinstance(depth, int) else \
            f"prefetch depth for {name} must be an integer, got {depth!r}"
        if msg:
            raise _KnobError(name, msg)
        if depth:
            k.prefetch[name] = depth
    for caps, problem, out in ((knobs.inflight, inflight_problem, k.inflight), (knobs.ahead, ahead_problem, k.ahead)):
        for name, n in caps.items():
            msg = problem(facts.info[name], n)
            if msg:
                raise _KnobError(name, msg)
            if n:
                out[name] = n
    order = list(knobs.order) or list(facts.ops)
    if sorted(order) != sorted(facts.ops):
        missing = [n for n in facts.ops if n not in order]
        extra = [n for n, c in _Tally(order).items() if c > 1 or n not in facts.info]
        raise _KnobError(None, "the op order must list every op exactly once"
                         + (f"; missing: {', '.join(missing[:5])}" if missing else "")
                         + (f"; unknown or repeated: {', '.join(extra[:5])}" if extra else ""))
    bad = order_problem(facts, order)
    if bad:
        raise _KnobError(*bad)
    k.order = order
    total = task_count(facts, k)
    if total > MAX_TASKS:
        raise _KnobError(None, f"these tile sizes give {total} tasks, over the limit of {MAX_TASKS}; use larger tiles")
    msg = inflight_rows_problem(facts, k)
    if msg:
        raise _KnobError(None, msg)
    canon_fused: dict[str, str] = {}
    for a in sorted(fused, key=order.index):
        msg = (inline_problem(facts, canon_fused, a, impls) if fused[a] == INLINE
               else fusion_problem(facts, canon_fused, a, fused[a]))
        if msg:
            raise _KnobError(a, msg)
        canon_fused[a] = fused[a]
    from megakernel_gym.compiler.impl_guard import impl_size_problem
    msg = impl_size_problem(impls)
    if msg:
        raise _KnobError(None, msg)
    canon_impls = {}
    for name in sorted(impls, key=order.index):
        msg = impl_problem(name, impls[name]) or impl_conflict(facts, k.splits, canon_fused, name)
        if msg:
            raise _KnobError(name, msg)
        canon_impls[name] = impls[name]
    return k, canon_fused, canon_impls


def impl_problem(name: str, code) -> str | None:
    if not isinstance(code, str) or not code.strip():
        return f"the code for {name} is empty; give the task body between <<< and >>>"
    if len(code) > MAX_IMPL_CHARS:
        return f"the code for {name} is {len(code)} characters; the limit is {MAX_IMPL_CHARS}"
    if ">>>" in code or "<<<" in code:
        return f"the code for {name} contains <<< or >>>, which delimit code blocks; rewrite it without them"
    from megakernel_gym.compiler.codegen import impl_code_problem
    msg = impl_code_problem(code)
    return f"impl {name}: {msg}" if msg else None


class _KnobError(Exception):
    def __init__(self, op: str | None, message: str):
        self.op, self.message = op, message
        super().__init__(message)


# ---------------------------------------------------------------------------------------
# the IR value


class IR:
    """Graph + knobs + fusion groups + task-body overrides. Treat as immutable: edits return a
    new IR. Knobs are kept canonical (default tile sizes, full SM ranges, tile counters and
    zero prefetch are left implicit; the order always lists every op)."""

    __slots__ = ("graph", "knobs", "fused", "impls", "facts", "_plan", "_text")

    def __init__(self, graph: Graph, knobs: Knobs | None = None, fused: dict[str, str] | None = None,
                 impls: dict[str, str] | None = None, num_sms: int = 132):
        facts = facts_of(graph)
        knobs = knobs if knobs is not None else Knobs(num_sms=num_sms)
        try:
            k, fu, im = normalize(facts, knobs, dict(fused or {}), dict(impls or {}))
        except _KnobError as e:
            raise IRError(e.message) from None
        self.graph, self.knobs, self.fused, self.impls, self.facts = graph, k, fu, im, facts
        self._plan: Plan | None = None
        self._text: str | None = None

    @property
    def ops(self) -> list[str]:
        return list(self.knobs.order)

    def tile(self, op: str) -> int:
        return tile_size(self.facts, self.knobs, op)

    def sms(self, op: str) -> tuple[int, int]:
        return self.knobs.sms.get(op, (0, self.knobs.num_sms - 1))

    def plan(self) -> Plan:
        """The per-SM plan these knobs build, proven safe by the validator (cached)."""
        if self._plan is None:
            try:
                knobs = self.knobs.copy()
                knobs.fused = dict(self.fused)
                plan = build_plan(self.graph, knobs)
            except (TilingError, ValueError) as e:
                raise IRError(f"the knobs do not build a plan: {e}") from None
            findings = check(plan)
            if findings:
                raise ScheduleError(findings)
            self._plan = plan
        return self._plan

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = render(self)
        return self._text

    def __eq__(self, other) -> bool:
        return (isinstance(other, IR) and (self.graph is other.graph or self.graph.name == other.graph.name)
                and self.knobs == other.knobs and self.fused == other.fused and self.impls == other.impls)

    __hash__ = None

    def __repr__(self) -> str:
        return f"IR({self.graph.name}, {len(self.facts.ops)} ops, {self.knobs.num_sms} SMs)"


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
    g = graph.graph if isinstance(graph, IR) else graph
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
