"""The expert schedule: what we know makes a decode megakernel fast, spelled as edits in the env's own
language and applied to the compiler's default, so it is a point an agent can reach (and read).

    text = expert_edits(ir)            # edit text; apply_edits(ir, text) gives the expert IR

On top of the compiler's tuned edits (ir_exposure.tuned_edits: matmuls folded into the elementwise op
they feed, ropes into their consumers, op-wide counters where a consumer reads every tile), each lever
measured alone in bench/results/megakernel_levers.json:

- `inline` every rmsnorm whose consumers are all matmuls reading it as their input vector, at most
  INLINE_MAX_CONSUMERS of them: each consumer task normalizes the vector in its own shared memory, so
  the norm costs no task of its own and no dependency hop (two per decoder layer). Not a norm read by
  a mixture of experts' router and every expert's gate and up (Mixtral's post-attention norm, 17
  matmuls, each tile normalizing again): on an H200 Mixtral's expert ran 8.1% faster with that norm a
  task of its own (778.7 -> 715.4 us, the sim 6.1%), its input norm (3 matmuls) 0.6% slower
  (bench/results/ab_knobs_mixtral_expert_unfuse_norm.json; found by a red team through the sim);
- `split` every decode attention over its cached positions (split-KV, as FlashDecoding), parts of
  SPLIT_POSITIONS positions at full length; the last part of a tile to finish combines the parts;
- one wave for sibling matmuls (q/k/v: one input vector, read by each): a common tile size so that
  together they have at most one task per SM, instead of q's tiles filling the chip and k/v waiting;
- `fuse` every KV-cache write into the decode attention that reads the cache: each attention task
  stages this step's q, k and v rows together, ropes them and stores the new k and v rows itself,
  so the attention waits for the projections, not for a cache-write task (on an H100 the 1B expert
  measured 1,068 us with it against 1,076 without, and 1,125 us when the fused writes ran as
  prologue calls one after another: bench/results/ab_knobs_step_inputs.json);
- `inflight` 1 for the matmuls on either side of each decode attention (q/k/v, o_proj) where the
  model's hidden size is at least INFLIGHT_HIDDEN: while their weights stream, the weight ring keeps
  one copy in flight instead of the compiler's two, so the dependency polls of the attention half's
  latency chain wait behind fewer copies (on an H100 the 1B expert measured 995.1 us against
  1,022.6, Qwen3-1.7B +3.0%, Mistral +2.7%: bench/results/ab_knobs_s20_expert.json,
  families_s20_expert.json; but 1-6% slower on the level-5 families of hidden size 896-1536,
  whose layers stream too few bytes to hide the slower stream: families_attn1.json).

- `spread` a lone matmul whose tiles leave most of the chip idle (fewer tasks than half the SMs, outside a
  sibling group) over every SM: the tile, of those its rows divide into (at least 8), that has an SM stream
  the fewest rows. GPT-2's 50,257-row lm_head (29 x 1,733) had its default tile of 1,733 rows, the smallest
  giving at most one task per SM, and so ran its 128 MB on 29 SMs; in 29-row tiles (1,733 tasks, at most 14
  an SM) GPT-2 large's expert ran 7.1% faster on an H200 (1660.4 -> 1550.8 us, ab_knobs_gpt2_lm29.json;
  found by an adversary's climb, issue 39).

Each lever is kept only where the IR accepts it, so any graph gets the subset that applies.
"""
from __future__ import annotations

from megakernel_gym.compiler.tasks import MAX_SPLIT
from megakernel_gym.compiler.legality import wave_tile as _wave_tile

LEVERS = ("inline", "split", "wave", "cache", "inflight", "spread")
# when each lever joined the expert after the first five (UTC, ISO): a schedule timed before it was the
# expert without it, and what re-prices those rows (bench/sim_score.py) rebuilds them so (levers_as_of)
LEVER_SINCE = {"spread": "2026-12-02T03:00"}


def levers_as_of(when: str | None) -> tuple[str, ...]:
    """The expert's levers at `when` (an ISO datetime, as result files date their runs; None: now, LEVERS)."""
    return LEVERS if when is None else tuple(lv for lv in LEVERS if LEVER_SINCE.get(lv, "") <= when)


SPLIT_POSITIONS = 128   # cached positions per split part at full length
INLINE_MAX_CONSUMERS = 3   # q, k and v; gate and up (module doc: not a router and its experts)
INFLIGHT_HIDDEN = 2048  # the smallest hidden size (an attention-side matmul's input width) the inflight lever takes


def split_parts(ir, name: str) -> int:
    """Parts for a decode attention's tiles: at most one task per SM over all its tiles, each part
    SPLIT_POSITIONS cached positions long at full length, at most MAX_SPLIT. A part costs a fixed
    few microseconds of round trips whatever its length, so parts pay only where a tile's rows
    take longer than that to stream: on an H100 the 1B step at position 168 of 1024 measured
    1,310 us unsplit, 1,317 us at 4 parts and 1,332 us at 8 with the kernel of that time
    (bench/results/task_probe_before_packed.json). Since the weight ring keeps fewer copies in
    flight (the polls and the attention's loads wait behind fewer), 8 parts measured 989.4 against
    995.1 us at 4 (ab_knobs_s20_expert.json), and with the same caps 1,025.8 unsplit and 1,007.6 at
    2 (ab_knobs_s20_attn1_sched.json); over the level-5 families 8 parts against 4 gained up to
    7.6% (Qwen2-0.5B) and lost at most 1.0% (SmolLM2; families_s20_split.json): 128 positions (8
    parts at 1,024)."""
    f = ir.facts.info[name]
    tiles = f.extent // ir.tile(name)
    max_seq = ir.graph.tensors[f.op.inputs[1]].shape[2]
    return max(1, min(MAX_SPLIT, ir.knobs.num_sms // max(1, tiles), max_seq // SPLIT_POSITIONS))


def sibling_matmuls(ir) -> list[list[str]]:
    """Groups of two or more matmuls that read the same input vector, in op order (q/k/v)."""
    groups: dict[str, list[str]] = {}
    for name in ir.ops:
        op = ir.facts.info[name].op
        if op.kind == "matmul" and name not in ir.fused:
            groups.setdefault(ir.facts.b(op.inputs[0]), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def wave_tile(ir, names: list[str]) -> int | None:
    """The smallest tile size every op in `names` allows that gives them at most one task per SM
    together, or None (compiler.legality.wave_tile on this IR's chip)."""
    return _wave_tile(ir.facts, names, ir.knobs.num_sms)


def spread_tile(ir, name: str) -> int | None:
    """A tile for matmul `name` that streams its rows over the whole chip, where its tiles now leave more
    than half the SMs idle: of the allowed tiles of at least 8 rows, the one whose SMs stream the fewest
    rows each (its tasks over the SMs, rounded up, times its rows; the larger tile on a tie). None where
    the op fills half the chip already or no tile streams fewer rows an SM than its own."""
    f, sms = ir.facts.info[name], ir.knobs.num_sms
    now = ir.tile(name)
    if f.extent // now >= sms // 2:
        return None
    rows = lambda t: -(-(f.extent // t) // sms) * t   # noqa: E731
    best = min((t for t in f.allowed() if t >= 8), key=lambda t: (rows(t), -t), default=now)
    return best if rows(best) < rows(now) else None


def attention_matmuls(ir) -> list[str]:
    """The matmuls on either side of a decode attention, in op order: those whose output reaches
    one, and those whose input is one's output, through ops that are not matmuls (ropes, cache
    writes, views)."""
    kinds = {n: ir.facts.info[n].op.kind for n in ir.ops}

    def reaches(name: str, want: str, step, depth: int = 4) -> bool:
        todo, seen = [name], set()
        for _ in range(depth):
            todo = [m for n in todo for m in step(n) if m not in seen and kinds.get(m) != "matmul"]
            seen.update(todo)
            if any(kinds.get(m) == want for m in todo):
                return True
        return False
    # facts.consumers is the inverse of each op's deps: walk the one forward, the other back
    return [n for n in ir.ops if kinds[n] == "matmul"
            and (reaches(n, "decode_attention", lambda m: ir.facts.consumers.get(m, []))
                 or reaches(n, "decode_attention", lambda m: ir.facts.info[m].deps))]


def lever_edits(ir, lever: str, parts: int | None = None) -> list[str]:
    """One lever's edit lines for `ir` (unchecked: apply them to see which the IR takes)."""
    kinds = {n: ir.facts.info[n].op.kind for n in ir.ops}
    if lever == "inline":
        return [f"inline {n}" for n in ir.ops if kinds[n] == "rmsnorm"
                and 0 < len(ir.facts.consumers[n]) <= INLINE_MAX_CONSUMERS
                and all(kinds[c] == "matmul" for c in ir.facts.consumers[n])]
    if lever == "split":
        return [f"split {n} n={parts or split_parts(ir, n)}" for n in ir.ops if kinds[n] == "decode_attention"]
    if lever == "cache":
        return [f"fuse {n} into {c}" for n in ir.ops if kinds[n] == "cache_write"
                for c in ir.facts.consumers[n] if kinds[c] == "decode_attention"]
    if lever == "inflight":
        names = attention_matmuls(ir)
        wide = names and max(ir.graph.tensors[ir.facts.info[n].op.inputs[0]].shape[-1] for n in names) >= INFLIGHT_HIDDEN
        return [f"inflight {n} n=1" for n in names] if wide else []
    if lever == "wave":
        out = []
        for group in sibling_matmuls(ir):
            t = wave_tile(ir, group)
            out += [f"tile {n} n={t}" for n in group] if t else []
        return out
    if lever == "spread":
        siblings = {n for group in sibling_matmuls(ir) for n in group}
        tiles = {n: spread_tile(ir, n) for n in ir.ops
                 if kinds[n] == "matmul" and n not in ir.fused and n not in siblings}
        return [f"tile {n} n={t}" for n, t in tiles.items() if t]
    raise ValueError(f"unknown lever {lever!r}; the levers are {', '.join(LEVERS)}")


def expert_edits(ir, levers: tuple[str, ...] = LEVERS, parts: int | None = None, tuned: bool = True) -> str:
    """The expert's edit text for `ir`: the tuned edits, then each lever's lines the IR accepts."""
    from megakernel_gym.ir_exposure.edits import EditError, apply_edits, tuned_edits
    kept = [tuned_edits(ir)] if tuned else []
    cur = apply_edits(ir, "\n".join(kept)) if kept else ir
    for lever in levers:
        lines = lever_edits(cur, lever, parts)
        try:                 # the whole lever at once (one plan and validation)...
            cur = apply_edits(cur, "\n".join(lines))
            kept += lines
            continue
        except EditError:
            pass
        for line in lines:   # ...and only where the IR refuses some of it, line by line
            try:
                cur = apply_edits(cur, line)
            except EditError:
                continue
            kept.append(line)
    return "\n".join(k for k in kept if k)


__all__ = ["expert_edits", "lever_edits", "split_parts", "sibling_matmuls", "wave_tile", "spread_tile", "attention_matmuls",
           "LEVERS", "LEVER_SINCE", "levers_as_of"]
