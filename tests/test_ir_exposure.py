"""The agent's view: IR text round trips, the edit language, and every bad input ending in a
clear message with the IR unchanged (never a trace, never a hang)."""
import random
import re

import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.schedule import Knobs
from megakernel_gym.compiler.codegen import onchip_norm_problem
from megakernel_gym.compiler.tasks import INLINE, allowed_tiles, lower
from megakernel_gym.compiler.validate import check
from megakernel_gym.ir_exposure import (IR, Edit, EditError, IRError, IRParseError, apply_edits, apply_json,
                                        count_tokens, edits_from_json, edits_to_json, format_edits, make_ir, parse,
                                        parse_edits, render, render_op)
from megakernel_gym.ir_exposure.ir import MAX_TASKS

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]
BIG = ["llama-1b", "mlp-1b", "attention-1b"]


@pytest.fixture(scope="module")
def big_graphs():
    out = {}
    for name in BIG:
        m, inputs = ZOO[name](device="meta")
        out[name] = capture(m, inputs, name)
    return out


@pytest.fixture(scope="module")
def tiny(graphs):
    return make_ir(graphs["llama-tiny"], num_sms=8)


# -- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("sms", [1, 8, 132])
def test_round_trip_tiny_models(graphs, name, sms):
    g = graphs[name]
    ir = make_ir(g, num_sms=sms)
    text = render(ir)
    back = parse(text, g)
    assert back == ir and render(back) == text
    assert text.startswith(f"mkir v1 model={name} sms={sms} ")
    views = [o.name for o in g.ops if o.kind == "view"]
    op_lines = [ln for ln in text.splitlines() if ln.startswith("op ")]
    assert len(op_lines) == len(g.ops) - len(views)              # each op once, views folded away
    assert not any(re.search(rf"(?<![\w.]){re.escape(v)}(?![\w])", text) for v in views)
    assert check(ir.plan()) == []


@pytest.mark.parametrize("name", BIG)
def test_round_trip_1b_shapes_and_token_budget(big_graphs, name):
    g = big_graphs[name]
    ir = make_ir(g)
    text = render(ir)
    back = parse(text, g)
    assert back == ir and render(back) == text
    tokens = count_tokens(text)
    if name == "llama-1b":
        assert "repeat i=1..15" in text                              # 16 identical layers print once (+ layer 0)
        # measured: 1760 regex tokens (\w+|[^\w\s]), 5227 characters, 40 lines
        assert tokens < 4000, f"llama-1b op-level IR text is {tokens} tokens"
    assert tokens < 4000, f"{name}: {tokens} tokens"


def test_1b_layer_edits_keep_text_compact(big_graphs):
    g = big_graphs["llama-1b"]
    ir = make_ir(g)
    every = apply_edits(ir, "tile layers.*.mlp.gate_proj n=128\nassign layers.*.attn.* sms=0-65")
    assert "repeat i=1..15" in every.text and "grid=64x128" in every.text
    one = apply_edits(every, "tile layers.7.mlp.up_proj n=128")        # breaks the run: 1..6, 7, 8..15
    assert "repeat i=1..6" in one.text and "repeat i=8..15" in one.text
    assert render(parse(one.text, g)) == one.text and parse(one.text, g) == one
    assert count_tokens(one.text) < 4000, count_tokens(one.text)


def test_op_level_dependencies_match_the_task_graph(graphs, tiny):
    """after= (the op-level dependency map) is exactly what the tile-level dependencies imply."""
    for name, g in graphs.items():
        ir = make_ir(g, num_sms=8)
        tg = lower(g, num_sms=8)
        for op, ids in tg.by_op.items():
            tile_level = {tg.tasks[d].op for t in ids for d in tg.deps[t]}
            assert set(ir.facts.info[op].deps) == tile_level, (name, op)
    assert "op layers.0.attn.decode_attention decode_attention in=.q_rope,.k_cache,.v_cache,pos out=[2,4,16] " \
           "grid=2x2 sms=0-7 counter=tile prefetch=0 after=.q_rope,.k_cache_write,.v_cache_write\n" in tiny.text


def test_render_op_shows_tasks_regions_waits_and_sms(tiny):
    text = render_op(tiny, "layers.0.attn.q_rope")
    plan = tiny.plan()
    lines = text.splitlines()
    assert lines[0].startswith("op layers.0.attn.q_rope rope ")
    tasks = [ln for ln in lines if ln.startswith("task ")]
    assert len(tasks) == 4                                           # one per head
    sm = plan.sm_of()
    for ln, tid in zip(tasks, plan.tg.by_op["layers.0.attn.q_rope"]):
        assert ln.startswith(f"task {tid} ") and f" sm={sm[tid]} " in ln
    # head 1 reads columns 16..31 of q_proj = q_proj tiles 2 and 3 (tile size 8)
    assert "reads=layers.0.attn.q_proj.view(2,4,16)[:,1:2,:] pos[:]" in tasks[1]
    assert "waits=layers.0.attn.q_proj[2]>=1,layers.0.attn.q_proj[3]>=1" in tasks[1]
    assert "writes=layers.0.attn.q_rope[:,1:2,:]" in tasks[1] and "bumps=layers.0.attn.q_rope[1]" in tasks[1]
    mm = render_op(apply_edits(tiny, "counter layers.0.attn.norm op"), "layers.0.attn.q_proj")
    assert "layers.0.attn.q_proj.weight[0:8,:]" in mm and "waits=layers.0.attn.norm>=2" in mm
    with pytest.raises(IRError, match="did you mean layers.0.attn.q_proj"):
        render_op(tiny, "layers.0.attn.q_prj")


# -- random valid edit sequences ----------------------------------------------------------


def _order_ok(facts, order):
    pos = {n: i for i, n in enumerate(order)}
    return all(pos[d] < pos[n] for n in order for d in facts.info[n].deps)


def _random_sequence(ir, rng):
    """Valid edits, generated against a mirror of the state they build (not the code under test)."""
    facts, g = ir.facts, ir.graph
    ops = ir.ops
    order, fused, impls = list(ops), dict(ir.fused), dict(ir.impls)
    want = Knobs(num_sms=ir.knobs.num_sms)
    state = set(g.outputs) | set(g.written_buffers())
    edits = []
    for _ in range(rng.randint(1, 6)):
        verb = rng.choice(["tile", "tile", "assign", "order", "order", "counter", "prefetch", "fuse", "unfuse",
                           "impl", "unimpl", "split", "inline"])
        op = rng.choice(ops)
        f = facts.info[op]
        if verb == "tile":
            n = rng.choice(allowed_tiles(f.op, f.extent, f.group))
            edits.append(Edit("tile", op, n=n))
            want.tiles[op] = n
        elif verb == "assign":
            lo = rng.randrange(want.num_sms)
            hi = rng.randrange(lo, want.num_sms)
            edits.append(Edit("assign", op, sms=(lo, hi)))
            want.sms[op] = (lo, hi)
        elif verb == "order":
            for _ in range(20):
                other, where = rng.choice(ops), rng.choice(["before", "after"])
                if other == op:
                    continue
                new = [x for x in order if x != op]
                new.insert(new.index(other) + (where == "after"), op)
                if _order_ok(facts, new):
                    edits.append(Edit("order", op, where=where, other=other))
                    order = new
                    break
        elif verb == "counter":
            mode = rng.choice(["tile", "op"])
            edits.append(Edit("counter", op, mode=mode))
            want.counters[op] = mode
        elif verb == "prefetch":
            op = rng.choice([n for n in ops if facts.info[n].reads_weight])
            depth = rng.randint(0, 8)
            edits.append(Edit("prefetch", op, depth=depth))
            want.prefetch[op] = depth
        elif verb == "split":
            op = rng.choice([n for n in ops if facts.info[n].op.kind == "decode_attention"])
            n = rng.choice([1, 2, 3, 5])
            if n > 1 and op in impls:
                continue
            edits.append(Edit("split", op, n=n))
            want.splits.pop(op, None) if n == 1 else want.splits.__setitem__(op, n)
        elif verb == "inline":
            cands = [a for a in ops if a not in fused and a not in fused.values() and facts.info[a].op.kind == "rmsnorm"
                     and facts.b(facts.info[a].out_name) not in state
                     and all(onchip_norm_problem(g, facts.info[a].op, facts.info[c].op) is None and c not in impls
                             for c in facts.consumers[a])]
            if cands:
                a = rng.choice(cands)
                fused[a] = INLINE
                edits.append(Edit("inline", a))
        elif verb == "fuse":
            cands = [a for a in ops if a not in fused and len(facts.consumers[a]) == 1
                     and facts.b(facts.info[a].out_name) not in state and fused.get(facts.consumers[a][0]) != INLINE
                     and facts.info[a].op.kind != "decode_attention"]   # (never fused into its consumer: issue 39)
            if cands:
                a = rng.choice(cands)
                fused[a] = facts.consumers[a][0]
                edits.append(Edit("fuse", a, other=fused[a]))
        elif verb == "unfuse" and fused:
            a = rng.choice(sorted(fused))
            del fused[a]
            edits.append(Edit("unfuse", a))
        elif verb == "impl":
            if want.splits.get(op, 1) > 1 or any(fused.get(a) == INLINE for a in facts.info[op].deps):
                continue
            # (placeholder bodies: what an impl's text does to the IR; impl_guard indexes only declared arrays and views)
            code = rng.choice(["y = a * 2", "\nfor i in range(n):\n    out[i] = silu(in0[i])\n", "return x"])
            impls[op] = code
            edits.append(Edit("impl", op, code=code))
        elif verb == "unimpl" and impls:
            a = rng.choice(sorted(impls))
            del impls[a]
            edits.append(Edit("unimpl", a))
    want.order = order
    return edits, IR(g, want, fused, impls)


def test_1000_random_valid_edit_sequences_round_trip(graphs):
    """Every verb, split and inline among them, in random valid sequences: the IR the edits give is the one
    a mirror of their meaning builds, its text parses back to it, and the validator accepts its plan."""
    g = graphs["llama-tiny"]
    rng = random.Random(1234)
    bases = {s: make_ir(g, num_sms=s) for s in (4, 8, 132)}
    seen = set()
    for i in range(1000):
        ir = bases[rng.choice([4, 8, 132])]
        edits, expected = _random_sequence(ir, rng)
        text_edits = format_edits(edits)
        assert parse_edits(text_edits) == edits
        assert edits_from_json(edits_to_json(edits)) == edits
        new = apply_edits(ir, text_edits)
        assert new == expected, (i, text_edits)
        text = render(new)
        back = parse(text, g)
        assert back == new and render(back) == text, (i, text_edits)
        assert check(new.plan()) == []
        if i % 10 == 0:
            assert apply_json(ir, edits_to_json(edits)) == new
        seen.update(e.verb for e in edits)
        if ir is not new:
            assert render(ir) == ir.text                              # the base IR was never touched
    assert seen == {"tile", "assign", "order", "counter", "prefetch", "fuse", "unfuse", "impl", "unimpl", "split", "inline"}


def test_json_edits_equal_text_edits(tiny):
    text = ("tile layers.*.attn.q_proj n=16\nassign layers.{0..1}.mlp.* sms=0-3\n"
            "order layers.0.attn.v_proj before layers.0.attn.k_proj\ncounter layers.0.mlp.up_proj op\n"
            "prefetch lm_head depth=2\nfuse layers.0.mlp.gate_proj into layers.0.mlp.silu_mul\n"
            "impl layers.1.mlp.silu_mul <<<\ny = silu(a) * b\n>>>\n")
    js = [{"verb": "tile", "op": "layers.*.attn.q_proj", "n": 16},
          {"verb": "assign", "op": "layers.{0..1}.mlp.*", "sms": [0, 3]},
          {"verb": "order", "op": "layers.0.attn.v_proj", "before": "layers.0.attn.k_proj"},
          {"verb": "counter", "op": "layers.0.mlp.up_proj", "mode": "op"},
          {"verb": "prefetch", "op": "lm_head", "depth": 2},
          {"verb": "fuse", "op": "layers.0.mlp.gate_proj", "into": "layers.0.mlp.silu_mul"},
          {"verb": "impl", "op": "layers.1.mlp.silu_mul", "code": "\ny = silu(a) * b\n"}]
    assert edits_to_json(parse_edits(text)) == js and format_edits(edits_from_json(js)) == text
    by_text, by_json = apply_edits(tiny, text), apply_json(tiny, js)
    assert by_text == by_json and by_text.text == by_json.text
    assert by_text.knobs.tiles["layers.1.attn.q_proj"] == 16 and by_text.knobs.sms["layers.1.mlp.add"] == (0, 3)
    assert "into=.silu_mul" in by_text.text and "impl layers.1.mlp.silu_mul <<<\ny = silu(a) * b\n>>>\n" in by_text.text
    assert by_text.knobs.order.index("layers.0.attn.v_proj") < by_text.knobs.order.index("layers.0.attn.k_proj")


# -- bad edits: a message for the agent, the IR unchanged --------------------------------

BAD_EDITS = [
    ("tile layers.0.attn.q_proj n=7",
     r"tile size 7 does not divide .* extent 64 .*allowed sizes: 1, 2, 4, 8, 16, 32, 64"),
    ("tile layers.0.attn.q_proj n=128", r"tile size 128 does not fit .*allowed sizes"),
    ("tile layers.0.attn.decode_attention n=1", r"split a group of 2 query heads.*allowed sizes: 2, 4"),
    ("tile nope n=8", r"no op named 'nope'"),
    ("tile layers.0.attn.q_prj n=8", r"did you mean layers.0.attn.q_proj"),
    ("tile layers.0.attn.q_reshape n=8", r"is a view.*read layers.0.attn.q_proj directly"),
    ("tile layers.*.nothing n=2", r"matches no op"),
    ("assign lm_head sms=0-200", r"outside the chip: this IR has 8 SMs, numbered 0-7"),
    ("assign lm_head sms=5-3", r"is empty"),
    ("order layers.0.attn.q_proj before layers.0.attn.norm",
     r"before layers.0.attn.norm, which it depends on \(layers.0.attn.q_proj reads layers.0.attn.norm's output\).*"
     r"can go after layers.0.attn.norm and before layers.0.attn.q_rope"),
    ("order layers.0.attn.norm after layers.0.mlp.add", r"after layers.0.attn.q_proj, which depends on it"),
    ("order lm_head before embed", r"before norm, which it depends on"),
    ("order layers.*.attn.q_proj before lm_head", r"order takes one op, but the pattern .* matches 2"),
    ("order lm_head before lm_head", r"itself"),
    ("fuse layers.0.attn.norm into layers.0.attn.q_proj",
     r"layers.0.attn.k_proj, layers.0.attn.v_proj also depend on layers.0.attn.norm.*would break that dependency"),
    ("fuse layers.0.attn.q_proj into layers.0.attn.k_proj", r"does not depend on .*`fuse layers.0.attn.q_proj into "
                                                            r"layers.0.attn.q_rope`"),
    ("fuse lm_head into norm", r"writes output, which the step must leave in memory"),
    ("fuse layers.0.attn.k_cache_write into layers.0.attn.o_proj", r"KV cache"),
    ("fuse layers.0.mlp.gate_proj into layers.0.mlp.silu_mul\nfuse layers.0.mlp.gate_proj into layers.0.mlp.silu_mul",
     r"edit 2 .*already fused into layers.0.mlp.silu_mul; unfuse it first"),
    ("unfuse lm_head", r"not fused"),
    ("fuse layers.*.mlp.gate_proj into layers.*.attn.add",
     r"cannot fuse layers.0.mlp.gate_proj: it feeds none of the 2 ops layers.\*.attn.add matches.*its consumers are "
     r"layers.0.mlp.silu_mul"),
    ("impl lm_head <<<   >>>", r"code for lm_head is empty"),
    ("impl lm_head <<<" + "x" * 20001 + ">>>", r"the limit is 20000"),
    ("impl lm_head <<<y = a", r"edit line 1: .*never closed with >>>"),
    ("impl lm_head <<<y>>> extra", r"unexpected text after >>>"),
    ("unimpl lm_head", r"no impl override"),
    ("prefetch layers.0.attn.q_rope depth=1", r"reads no weight"),
    ("prefetch lm_head depth=9", r"allowed depths: 0-8"),
    ("counter lm_head warp", r"counter mode must be one of: tile, op"),
    ("frobnicate lm_head", r"unknown verb `frobnicate`; the edits are: tile OP n=SIZE"),
    ("tile lm_head", r"edit line 1: expected `tile OP n=SIZE`"),
    ("tile lm_head n=99999999999999999999", r"expected `tile OP n=SIZE`"),
    ("assign lm_head sms=a-b", r"expected `assign OP sms=FIRST-LAST"),
    ("order lm_head above norm", r"expected `order OP before OTHER"),
    ("\n\ncounter lm_head op\nfuse lm_head onto norm", r"edit line 4: expected `fuse OP into CONSUMER`"),
    ("tile layers.0.attn.q_proj n=16\ntile layers.0.attn.k_proj n=3", r"^edit 2 \(`tile layers.0.attn.k_proj n=3`\)"),
]


@pytest.mark.parametrize("edit,pattern", BAD_EDITS, ids=[e[:40] for e, _ in BAD_EDITS])
def test_bad_edit_gives_a_message_and_an_unchanged_ir(tiny, edit, pattern):
    before = render(tiny)
    with pytest.raises(EditError) as info:
        apply_edits(tiny, edit)
    msg = str(info.value)
    assert re.search(pattern, msg), msg
    assert "Traceback" not in msg and len(msg) < 2000
    assert render(tiny) == before and tiny.text == before


def test_too_many_tasks_is_refused_not_hung(big_graphs):
    ir = make_ir(big_graphs["llama-1b"])
    with pytest.raises(EditError, match=rf"tasks, over the limit of {MAX_TASKS}; use a larger tile size"):
        apply_edits(ir, "tile lm_head n=1")
    assert render(ir) == ir.text


BAD_JSON = [
    ("not json", r"do not parse"),
    (42, r"must be a list of objects"),
    ([{"op": "lm_head", "n": 8}], r"JSON edit 1: \"verb\" must be one of tile, assign"),
    ([{"verb": "tile", "n": 8}], r"\"op\" must be an op name"),
    ([{"verb": "tile", "op": "lm_head", "n": "8"}], r"tile needs an integer \"n\""),
    ([{"verb": "tile", "op": "lm_head", "size": 8}], r"unexpected key\(s\) size for tile; it takes n"),
    ([{"verb": "assign", "op": "lm_head", "sms": [0]}], r"assign needs \"sms\": \[FIRST, LAST\]"),
    ([{"verb": "order", "op": "lm_head", "before": "norm", "after": "norm"}], r"exactly one of"),
    ([{"verb": "counter", "op": "lm_head", "mode": "warp"}], r"counter needs \"mode\""),
    ([{"verb": "impl", "op": "lm_head"}], r"impl needs \"code\""),
    ([{"verb": "tile", "op": "lm_head", "n": 8}, {"verb": "tile", "op": "lm_head", "n": 7}],
     r"edit 2 .*tile size 7 does not divide"),
]


@pytest.mark.parametrize("obj,pattern", BAD_JSON, ids=[str(i) for i in range(len(BAD_JSON))])
def test_bad_json_edit(tiny, obj, pattern):
    before = render(tiny)
    with pytest.raises(EditError, match=pattern):
        apply_json(tiny, obj)
    assert render(tiny) == before


def test_patterns_and_resets(tiny):
    ir = apply_edits(tiny, "tile layers.{i}.attn.q_proj n=16\nassign layers.{1..1}.mlp.* sms=2\n"
                           "fuse layers.0.mlp.gate_proj into layers.0.mlp.silu_mul\n"
                           "fuse layers.0.mlp.up_proj into layers.0.mlp.silu_mul")
    assert ir.knobs.tiles == {"layers.0.attn.q_proj": 16, "layers.1.attn.q_proj": 16}
    assert {op for op in ir.knobs.sms} == {o for o in ir.ops if o.startswith("layers.1.mlp.")}
    assert ir.fused == {"layers.0.mlp.gate_proj": "layers.0.mlp.silu_mul",
                        "layers.0.mlp.up_proj": "layers.0.mlp.silu_mul"}
    back = apply_edits(ir, "tile layers.*.attn.q_proj n=8\nassign layers.*.mlp.* sms=all\nunfuse layers.0.mlp.silu_mul")
    assert back == tiny and back.text == tiny.text                  # defaults are implicit: back to the same IR
    assert apply_edits(tiny, "") is tiny and apply_edits(tiny, "# nothing\n\n") is tiny
    # a fuse over patterns pairs each layer's producer with the consumer it feeds (every layer alike in one line)
    every = apply_edits(tiny, "fuse layers.*.mlp.up_proj into layers.*.mlp.silu_mul")
    assert every.fused == {f"layers.{i}.mlp.up_proj": f"layers.{i}.mlp.silu_mul" for i in (0, 1)}


# -- bad IR text: line-numbered, never a trace ---------------------------------------------


def _mutate_line(text, lineno, fn):
    lines = text.split("\n")
    lines[lineno - 1] = fn(lines[lineno - 1])
    return "\n".join(lines)


def test_parse_errors_are_line_numbered(graphs, tiny):
    g = graphs["llama-tiny"]
    text = tiny.text
    n = text.count("\n")
    cases = [
        ("", 1, r"empty"),
        ("garbage\n", 1, r"expected the header"),
        (text.replace("model=llama-tiny", "model=mlp-tiny"), 1, r"for model 'mlp-tiny'"),
        (text.replace("sms=8 ", "sms=0 ", 1), 1, r"sms=0 is out of range"),
        (_mutate_line(text, 3, lambda s: s.replace("grid=2x1", "grid=2x3")), 3, r"tile size 3 does not"),
        (_mutate_line(text, 4, lambda s: s.replace("grid=8x8", "grid=4x8")), 4, r"does not cover its extent 64"),
        (_mutate_line(text, 4, lambda s: s.replace("sms=0-7", "sms=0-8")), 4, r"outside the chip"),
        (_mutate_line(text, 4, lambda s: s.replace("counter=tile", "counter=warp")), 4, r"counter= must be one of"),
        (_mutate_line(text, 4, lambda s: s.replace("prefetch=0", "prefetch=x")), 4, r"prefetch= must be a number"),
        (_mutate_line(text, 4, lambda s: s.replace("prefetch=0", "")), 4, r"separated by single spaces"),
        (_mutate_line(text, 4, lambda s: s.replace(" prefetch=0", "")), 4, r"missing prefetch="),
        (_mutate_line(text, 4, lambda s: s + " speed=11"), 4, r"unexpected `speed=11`"),
        (_mutate_line(text, 4, lambda s: s.replace("layers.0.attn.q_proj", "layers.0.attn.qq")), 4, r"no op named"),
        (_mutate_line(text, 4, lambda s: s.replace("in=.norm", "in=.norm2")), 4, r"does not match what the graph"),
        (_mutate_line(text, 5, lambda s: s.replace("k_proj", "q_proj", 1)), 5, r"appears twice \(first on line 4\)"),
        ("\n".join(text.split("\n")[:-3]) + "\n", n - 2, r"no line for op\(s\) norm, lm_head"),
        (text + "extra\n", n + 1, r"expected an op line"),
        (text + "impl lm_head <<<x\n", n + 1, r"never closed with >>>"),
        (text + "impl lm_head <<<x>>>tail\n", n + 1, r"unexpected text after >>>"),
        (text + "impl lm_head <<<x>>>\nimpl lm_head <<<y>>>\n", n + 2, r"second impl block"),
        (text + "impl lm_head <<<   >>>\n", n + 1, r"code for lm_head is empty"),
        (text + "impl layers.0.attn.q_reshape <<<x>>>\n", n + 1, r"is a view"),
        (text + "end\n", n + 1, r"`end` without a `repeat`"),
        (_mutate_line(text, 20, lambda s: f"repeat i=1..999999\n  {s}\nend"), 20, r"more op lines"),
        (text.replace("\nop layers.1", "\nrepeat i=3..2\nop layers.1", 1), 20, r"FIRST < LAST"),
        (text.replace("\nop layers.1", "\nrepeat i=1..2\nop layers.1", 1), 21, r"inside a repeat block"),
        (text + "repeat i=1..2\n  op lm_head\n", n + 1, r"never closed with `end`"),
        (_mutate_line(text, 20, lambda s: f"repeat i=1..1\n  {s}\nend"), 20, r"FIRST < LAST"),
        (_mutate_line(text, 20, lambda s: "repeat i=1..2\nend"), 21, r"empty repeat block"),
        (text.rstrip("\n"), n, r"ends early"),
        (text + "\n", n + 1, r"expected an op line|extra text"),
        # swapping two lines puts q_proj before the norm it reads: an order that breaks a dependency
        (_swap(text, 3, 4), 3, r"layers.0.attn.q_proj comes before layers.0.attn.norm, but it depends on"),
        (text.replace("dtype=float32", "dtype=float16"), 1, r"does not match what the graph"),
        (re.sub(r"tasks=\d+", "tasks=1", text), 1, r"does not match"),
        (_mutate_line(text, 4, lambda s: s + " into=.k_proj"), 4, r"does not depend on layers.0.attn.q_proj"),
        (_mutate_line(text, 4, lambda s: s + " into=.nothing"), 4, r"into= names no op"),
        (_mutate_line(text, 3, lambda s: s + " into=.q_proj"), 3, r"also depend on layers.0.attn.norm"),
    ]
    for bad, line, pattern in cases:
        before = tiny.text
        try:
            parse(bad, g)
        except IRParseError as err:
            e = err
        else:
            pytest.fail(f"accepted a bad IR text ({pattern})")
        assert e.line == line and str(e).startswith(f"line {line}: "), (pattern, str(e))
        assert re.search(pattern, str(e)), (pattern, str(e))
        assert tiny.text == before


def _swap(text, a, b):
    lines = text.split("\n")
    lines[a - 1], lines[b - 1] = lines[b - 1], lines[a - 1]
    return "\n".join(lines)


def test_knob_lines_edited_by_hand_parse(graphs, tiny):
    """The knob fields of the text are the IR: change one and parse reads the change."""
    g = graphs["llama-tiny"]
    text = _mutate_line(tiny.text, 4,
                        lambda s: s.replace("grid=8x8", "grid=4x16").replace("counter=tile", "counter=op"))
    tasks = int(re.search(r"tasks=(\d+)", text).group(1))
    text = text.replace(f"tasks={tasks}", f"tasks={tasks - 4}")             # q_proj: 8 tiles -> 4
    ir = parse(text, g)
    assert ir.knobs.tiles == {"layers.0.attn.q_proj": 16} and ir.knobs.counters == {"layers.0.attn.q_proj": "op"}
    assert render(ir) == text
    assert ir == apply_edits(tiny, "tile layers.0.attn.q_proj n=16\ncounter layers.0.attn.q_proj op")


def test_fuzzed_ir_text_never_escapes(graphs, tiny):
    g = graphs["llama-tiny"]
    text = apply_edits(tiny, "fuse layers.0.mlp.gate_proj into layers.0.mlp.silu_mul\n"
                             "impl lm_head <<<\ny = x\n>>>").text
    rng = random.Random(7)
    accepted = 0
    for _ in range(400):
        t = list(text)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(t))
            op = rng.random()
            if op < 0.4:
                del t[i]
            elif op < 0.7:
                t[i] = rng.choice("0123456789x-=,.[]{}<>\n abi")
            else:
                t.insert(i, rng.choice("0123456789x-=\n {}<>"))
        bad = "".join(t)
        try:
            ir = parse(bad, g)
        except IRParseError as e:
            assert 1 <= e.line <= bad.count("\n") + 1
            continue
        accepted += 1
        assert render(ir) == bad                                     # anything accepted round-trips exactly
    assert accepted < 400


def test_fuzzed_edit_text_never_escapes(tiny):
    """Word salad and character-level mutations of a valid batch: each either applies (and
    round-trips) or ends in EditError, and the IR given is never changed."""
    rng = random.Random(11)
    words = ["tile", "assign", "order", "counter", "prefetch", "fuse", "unfuse", "impl", "unimpl", "lm_head", "norm",
             "layers.0.attn.q_proj", "layers.*.mlp.*", "{1..0}", "{i}", "n=8", "n=0", "n=-1", "sms=0-7", "sms=9",
             "before", "after", "into", "op", "tile", "depth=3", "<<<", ">>>", "x", "\n", "=", "-"]
    valid = ("tile layers.0.attn.q_proj n=16\nassign layers.*.mlp.* sms=2-5\norder lm_head after norm\n"
             "counter norm op\nprefetch lm_head depth=3\nfuse layers.1.attn.k_rope into layers.1.attn.k_cache_write\n"
             "impl lm_head <<<y = x @ w>>>\n")
    assert apply_edits(tiny, valid) != tiny
    applied = 0
    for k in range(600):
        if k % 2:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        else:
            t = list(valid)
            for _ in range(rng.randint(1, 2)):
                t[rng.randrange(len(t))] = rng.choice("0123456789x-=.*{}<>\n ")
            text = "".join(t)
        before = tiny.text
        try:
            new = apply_edits(tiny, text)
            applied += 1
            assert render(parse(new.text, tiny.graph)) == new.text
        except EditError as e:
            assert str(e) and "Traceback" not in str(e)
        assert tiny.text == before
    assert 0 < applied < 600
