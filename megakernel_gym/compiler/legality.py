"""The schedule IR's legality model: what an agent may ask of the compiler, checked against the graph.

An `IR` is a captured `Graph` plus the schedule `Knobs` an agent edits, plus fusion groups
(`fused`: producer op -> the consumer it is fused into; handed to the compiler as
`Knobs.fused` when the plan is built) and task-body overrides (`impls`: op -> code text, which
the GPU codegen will compile in place of the built-in body). `GraphFacts` derives once per graph
what every rule needs (each op's tile axis and extent, its output, the op-level dependency map);
the `*_problem` functions are the knob rules, each returning None or a message that says what is
allowed; `normalize` applies them all and keeps the knobs canonical. The parser, the IR
constructor and the edit language share these rules.

The text the agent reads and writes (render, parse, the legend) is `ir_exposure/ir.py`, whose
`IR` extends this one with `.text`.
"""
from __future__ import annotations

import difflib
import math
from collections import Counter as _Tally
from dataclasses import dataclass

from megakernel_gym.compiler.codegen import MAX_AHEAD, MAX_INFLIGHT, impl_code_problem
from megakernel_gym.compiler.graph import Graph, Op
from megakernel_gym.compiler.schedule import COUNTER_MODES, Knobs, Plan, build_plan
from megakernel_gym.compiler.tasks import (INLINE, MAX_SPLIT, TilingError, allowed_tiles, default_tile,
                                           tile_axis, tile_group)
from megakernel_gym.compiler.validate import ScheduleError, check

MAX_SMS = 1024            # largest chip the header may name
MAX_PREFETCH = 8          # weight tiles an op may load ahead of its current one
RING_ROWS = 1 << 16       # a ring call's rows, where any op has its own cap (the stream's rows word keeps 16 bits)
MAX_TASKS = 65536         # all ops' tiles together: a 28-32-layer model's default is 35-40k; keeps planning to seconds
MAX_IMPL_CHARS = 20000    # one op's task-body override


class IRError(ValueError):
    """An IR that cannot be built (bad knobs, unknown op); the message says what is allowed."""


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

    __slots__ = ("graph", "knobs", "fused", "impls", "facts", "_plan")

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

    def __eq__(self, other) -> bool:
        return (isinstance(other, IR) and (self.graph is other.graph or self.graph.name == other.graph.name)
                and self.knobs == other.knobs and self.fused == other.fused and self.impls == other.impls)

    __hash__ = None

    def __repr__(self) -> str:
        return f"IR({self.graph.name}, {len(self.facts.ops)} ops, {self.knobs.num_sms} SMs)"
