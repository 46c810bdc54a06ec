"""What one action may cost (issue 39 item 5): op patterns match in linear time, numbers are ASCII
digits, a plan's task dependencies are capped before they are built, an impl edit's fan-out is
capped, the lowering caches are bounded by bytes, and every adversarial action is answered, through
the env's own step, within a second of CPU and bounded memory; each refusal beside an honest
neighbour that stays accepted."""
import functools
import gc
import json
import random
import re
import subprocess
import sys
import time
import types
import weakref
from collections import OrderedDict

import numpy as np
import pytest

from megakernel_gym.compiler import ZOO, capture, tasks
from megakernel_gym.compiler.tasks import DependencyLimitError, _overlap_bound, _overlap_pairs, _Spans
from megakernel_gym.ir_exposure import EditError, apply_edits, apply_json, make_ir, parse_edits
from megakernel_gym.ir_exposure.edits import MAX_IMPL_OPS, _matches, _pattern


# ---------------------------------------------------------------------------------------
# op patterns


@pytest.fixture(scope="module")
def deep_names(graphs):
    """Op names shaped like the deepest zoo model's (36 layers: gpt2-large's count, above llama-1b's
    16), from llama-tiny's: more and as long names as any model's."""
    ops = make_ir(graphs["llama-tiny"], num_sms=8).facts.ops
    layer = [n for n in ops if n.startswith("layers.1.")]
    names = [n for n in ops if not n.startswith("layers.")]
    names[1:1] = [n.replace("layers.1.", f"layers.{k}.", 1) for k in range(36) for n in layer]
    return types.SimpleNamespace(ops=names)


def _hits(facts, op):
    pat = _pattern(op)
    return _matches(facts, op, pat) if pat else [op]


PATHOLOGICAL = ["*" * 200 + "Q", "*" * 14 + "Q", "*l" * 12 + "Q", "*.*" * 12 + "Q", "*{i}" * 6 + "Q",
                "{i}" * 30 + "*", "*a*t*t*n*." * 3 + "Q", "layers.*" * 8 + "Q", "*" + "{0..999999}*" * 8 + "Q",
                "*x" * 90_000, "*" + "." * 40 + "*Q"]


@pytest.mark.parametrize("op", PATHOLOGICAL, ids=lambda p: f"{p[:24]}...{len(p)}")
def test_a_pathological_pattern_is_answered_in_linear_time(deep_names, op):
    """`*` * 200 + `Q` (and kin) against every name of a 36-layer model: a backtracking regex took
    over a minute per name for 14 stars; each is answered in milliseconds, matching nothing."""
    deep_names.__dict__.pop("_pattern_hits", None)
    t = time.process_time()
    assert _hits(deep_names, op) == []
    assert time.process_time() - t < 0.1


def test_patterns_still_name_what_they_named(deep_names):
    hits = lambda op: _hits(deep_names, op)  # noqa: E731
    assert hits("layers.*.mlp.down_proj") == [f"layers.{k}.mlp.down_proj" for k in range(36)]
    assert hits("layers.{0..3}.mlp.down_proj") == [f"layers.{k}.mlp.down_proj" for k in range(4)]
    assert hits("layers.{i}.attn.q_proj")[-1] == "layers.35.attn.q_proj"
    assert hits("layers.{30..35}.*proj") == [n for n in deep_names.ops if re.fullmatch(r"layers\.3[0-5]\..*proj", n)]
    assert hits("*_proj") == [n for n in deep_names.ops if n.endswith("_proj")]
    assert hits("**.norm") == [n for n in deep_names.ops if n.endswith(".norm")]
    # a number is a whole number of the name: layer 23's `3` is not layer 3
    assert hits("layers.*{3..4}.mlp.add") == ["layers.3.mlp.add", "layers.4.mlp.add"]
    with pytest.raises(EditError, match=r"the range \{7\.\.3\} .* is empty: write the smaller number first"):
        apply_edits(ir_of_tiny(), "tile layers.{7..3}.mlp.down_proj n=8")


def _reference(op: str, name: str) -> bool:
    """What a pattern means, by brute force: `*` any text, `{i}` a whole number, `{lo..hi}` one in range."""
    toks, i = [], 0
    for m in re.finditer(r"\*|\{(?:([0-9]{1,6})\.\.([0-9]{1,6})|[A-Za-z_][A-Za-z0-9_]*(?:-1)?)\}", op):
        toks += [("lit", c) for c in op[i:m.start()]]
        toks.append(("star",) if m.group(0) == "*" else ("num", m.group(1) and int(m.group(1)),
                                                         m.group(2) and int(m.group(2))))
        i = m.end()
    toks += [("lit", c) for c in op[i:]]

    @functools.lru_cache(maxsize=None)
    def at(t: int, n: int) -> bool:
        if t == len(toks):
            return n == len(name)
        tok = toks[t]
        if tok[0] == "lit":
            return n < len(name) and name[n] == tok[1] and at(t + 1, n + 1)
        if tok[0] == "star":
            return any(at(t + 1, k) for k in range(n, len(name) + 1))
        j = n
        while j < len(name) and name[j] in "0123456789":
            j += 1
        if j == n or (n and name[n - 1] in "0123456789"):
            return False
        return (tok[1] is None or tok[1] <= int(name[n:j]) <= tok[2]) and at(t + 1, j)
    return at(0, 0)


def test_patterns_match_as_the_brute_force_reference_does(deep_names):
    rng = random.Random(7)
    pieces = ["*", "**", "{i}", "{0..3}", "{3..17}", "{10..35}", ".", "layers", "mlp", "attn", "1", "3", "_",
              "proj", "q", "norm", "add", "{5..5}"]
    names = deep_names.ops[::3]
    for _ in range(200):
        if rng.random() < 0.5:
            base = rng.choice(names)
            op = "".join(rng.choice(["*", "{i}", "{0..9}", "{3..20}", t]) if rng.random() < 0.3 else t
                         for t in re.split(r"([0-9]+|\.)", base))
        else:
            op = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 7)))
        if _pattern(op) is None:
            continue
        facts = types.SimpleNamespace(ops=names)
        assert _hits(facts, op) == [n for n in names if _reference(op, n)], op


@functools.lru_cache(maxsize=None)
def _tiny_graph():
    return capture(*ZOO["llama-tiny"](), "llama-tiny")


def ir_of_tiny():
    return make_ir(_tiny_graph(), num_sms=8)


# ---------------------------------------------------------------------------------------
# numbers are ASCII digits


@pytest.mark.parametrize("text, char", [
    ("assign layers.0.mlp.add sms=٠-٩", "U+0660"),              # Arabic-Indic digits
    ("tile layers.0.mlp.down_proj n=６４", "U+FF16"),             # fullwidth
    ("prefetch layers.0.mlp.down_proj depth=३", "U+0969"),        # Devanagari
    ("split layers.0.attn.decode_attention n=𝟐", "U+1D7D0"),      # mathematical bold
    ("assign layers.{٠..١}.mlp.add sms=0-3", "U+0660"),           # in a pattern's range
    ("impl layers.٠.mlp.add <<<out[lo] = 0.f;>>>", "U+0660"),     # in an impl's op
])
def test_digits_of_other_scripts_are_refused_by_name(text, char):
    with pytest.raises(EditError, match=rf"{re.escape(char)}\) is not an ASCII digit; write numbers with the digits 0-9"):
        parse_edits(text)
    with pytest.raises(EditError, match="edit line 1: .*not an ASCII digit; write numbers with the digits 0-9"):
        apply_edits(ir_of_tiny(), text)


def test_ascii_digits_stay_accepted():
    ir = apply_edits(ir_of_tiny(), "assign layers.0.mlp.add sms=0-6\nprefetch layers.0.mlp.down_proj depth=2\n"
                                   "assign layers.{0..1}.attn.add sms=2-5")
    assert ir.sms("layers.0.mlp.add") == (0, 6) and ir.sms("layers.1.attn.add") == (2, 5)
    assert ir.knobs.prefetch["layers.0.mlp.down_proj"] == 2
    assert apply_json(ir_of_tiny(), [{"verb": "assign", "op": "layers.0.mlp.add", "sms": "1-7"}]).sms(
        "layers.0.mlp.add") == (1, 7)


@pytest.mark.parametrize("obj, match", [
    ({"verb": "assign", "op": "layers.0.mlp.add", "sms": "٠-٩"}, r"\"sms\": .*U\+0660.*0-9"),
    ({"verb": "fuse", "op": "layers.0.mlp.gate_proj", "into": "layers.٠.mlp.silu_mul"}, r"\"into\": .*U\+0660"),
    ({"verb": "tile", "op": "layers.0.mlp.down_proj", "n": 10 ** 5000}, r"more than 60 digits, out of range"),
    ({"verb": "tile", "op": "layers.0.mlp.down_proj", "n": -1}, r"out of range: numbers in edits are 0-"),
    ({"verb": "assign", "op": "layers.0.mlp.add", "sms": [0, 10 ** 5000]}, r"a list of|SM numbers 0-"),
    ({"verb": "prefetch", "op": "layers.0.mlp.down_proj", "depth": list(range(10 ** 5))}, r"a list of 100000 items"),
])
def test_json_numbers_are_bounded_and_ascii(obj, match):
    with pytest.raises(EditError, match=match):
        apply_json(ir_of_tiny(), [obj])


# ---------------------------------------------------------------------------------------
# task dependencies


@pytest.fixture(scope="module")
def mlp_1b():
    return make_ir(capture(*ZOO["mlp-1b"](device="meta"), "mlp-1b"), num_sms=132)


def test_tiling_to_one_is_refused_before_a_dependency_is_built(mlp_1b):
    """down_proj at n=1 reads silu_mul's output whole: 2,048 x 8,192 tasks = 16.8M dependencies,
    refused from the op-level count in milliseconds (it took 26 s and 5.75 GB on four 1B layers)."""
    t = time.process_time()
    with pytest.raises(EditError, match=rf"task dependencies, over the limit of {tasks.MAX_DEPENDENCIES:,} .* the most: down_proj "
                                        r"\(2,048 tasks\) on silu_mul \(8,192 tasks\): 16,777,216.*Use larger tiles"):
        apply_edits(mlp_1b, "tile * n=1")
    with pytest.raises(EditError, match=r"task dependencies, over the limit"):
        apply_edits(mlp_1b, "tile silu_mul n=2\ntile down_proj n=1")
    assert time.process_time() - t < 0.5
    # honest neighbours: a smaller down tile, and both small but within the cap (256 x 1,024 = 262k)
    assert apply_edits(mlp_1b, "tile down_proj n=64").tile("down_proj") == 64
    assert apply_edits(mlp_1b, "tile silu_mul n=8\ntile down_proj n=8").plan() is not None


def test_the_exact_count_refuses_what_the_whole_read_count_misses(monkeypatch, graphs):
    """Dependencies through partial reads are counted from the lowered spans, before any pair is
    built; a plan's pairs already built count as they are."""
    g = graphs["llama-tiny"]
    tg = tasks.lower(g, {}, 8)
    edges = len(tasks.dep_edges(tg)[0])
    parts = tg.__dict__["_op_lowerings"]
    with pytest.raises(DependencyLimitError, match=r"up to .* task dependencies, over the limit of 10") as e:
        tasks._dependency_arrays(parts, len(tg.tasks), limit=10)
    assert e.value.ops
    assert len(tasks._dependency_arrays(parts, len(tg.tasks), limit=10 ** 9)[0]) == edges
    monkeypatch.setattr(tasks, "MAX_DEPENDENCIES", 50)
    with pytest.raises(DependencyLimitError):
        tasks.lower(g, {"layers.0.mlp.silu_mul": 1}, 8)


def test_overlaps_are_found_in_time_of_the_pairs_and_counted_exactly():
    rng = random.Random(3)

    def brute(q, f):
        (qlo, qhi, qt), (lo, hi, t) = q.arrays(), f.arrays()
        return [(int(qt[i]), int(t[j])) for i in range(len(qlo)) for j in range(len(lo))
                if qlo[i] < hi[j] and lo[j] < qhi[i]]
    for trial in range(600):
        q, f = _Spans(), _Spans()
        for i in range(rng.randrange(0, 10)):
            for r in range(rng.randrange(1, 3)):
                a = rng.randrange(50) + 100 * r
                q.add(((a, a + rng.randrange(1, 10)),), i)
        for i in range(rng.randrange(0, 10)):
            kind = trial % 4
            spans = (((5 * i, 5 * i + 5),) if kind == 0 else ((0, 40),) if kind == 1 else
                     ((5 * i, 5 * i + 5), (100 + 5 * i, 105 + 5 * i)) if kind == 2 else
                     ((lambda a: (a, a + rng.randrange(1, 10)))(rng.randrange(50)),))
            f.add(spans, i)
        want = brute(q, f)
        got = [tuple(p) for p in _overlap_pairs(q, f).tolist()]
        assert sorted(got) == sorted(set(want))
        spans, bound = _overlap_bound(q, f)
        assert spans == len(want) and len(set(want)) <= bound
    # 8,192 x 2,048 tiles of one tensor against one whole read: the pairs, not the product, in time
    q, f = _Spans(), _Spans()
    for i in range(2048):
        q.add(((0, 8192 * 4),), i)
    for i in range(8192):
        f.add(((4 * i, 4 * i + 4),), i)
    t = time.process_time()
    assert _overlap_bound(q, f) == (2048 * 8192, 2048 * 8192)
    assert time.process_time() - t < 0.1


# ---------------------------------------------------------------------------------------
# impl fan-out


def test_an_impl_may_go_to_a_few_ops_not_to_every_op():
    from test_codegen import SILU_MUL_BODY
    ir = ir_of_tiny()
    with pytest.raises(EditError, match=rf"impl \* names {len(ir.facts.ops)} ops.*at most {MAX_IMPL_OPS} may have "
                                        r"one.*Name fewer ops"):
        apply_edits(ir, "impl * <<<" + SILU_MUL_BODY + ">>>")
    assert set(apply_edits(ir, f"impl layers.*.mlp.silu_mul <<<{SILU_MUL_BODY}>>>").impls) == {
        "layers.0.mlp.silu_mul", "layers.1.mlp.silu_mul"}


# ---------------------------------------------------------------------------------------
# caches bounded by bytes


def test_trim_by_bytes_keeps_the_newest_within_the_budget():
    store = OrderedDict((k, np.zeros(1 << 17)) for k in range(10))   # 1 MB each
    tasks.trim_by_bytes(store, 3 << 20)
    assert list(store) == [7, 8, 9]
    tasks.trim_by_bytes(store, 1)
    assert list(store) == [9]


def test_kept_values_are_bounded_by_bytes(monkeypatch, graphs):
    monkeypatch.setattr(tasks, "KEPT_BYTES", 3 << 20)
    tg = tasks.lower(graphs["mlp-tiny"], {}, 8)
    for k in range(8):
        tasks.kept(tg, "_test_store", k, lambda: np.zeros(1 << 17))
    assert list(tg.__dict__["_test_store"]) == [5, 6, 7]


def test_lowerings_are_bounded_by_bytes_and_let_go(monkeypatch, graphs):
    g = graphs["mlp-tiny"]
    monkeypatch.setattr(tasks, "LOWERED_BYTES", 1)
    monkeypatch.setattr(tasks, "OP_CACHE_BYTES", 1)
    cache = tasks._op_cache(g)
    first = tasks.lower_cached(g, {"silu_mul": 1, "down_proj": 1}, 8)
    old = weakref.ref(next(low for name, low, _ in first.__dict__["_op_lowerings"] if name == "silu_mul"))
    del first
    newest = tasks.lower_cached(g, {"silu_mul": 2}, 8)
    in_use = {id(low) for _, low, _ in newest.__dict__["_op_lowerings"]}
    assert [tg for _, tg in tasks._LOWERED.values() if tg.graph is g] == [newest]
    assert {id(low) for low in cache.ops.values()} <= in_use
    gc.collect()
    assert old() is None      # not kept alive by the pairs of the lowerings that read it


def test_a_lowering_refused_for_its_dependencies_lets_its_op_lowerings_go(monkeypatch, graphs):
    """A plan over MAX_DEPENDENCIES is refused after its ops are lowered (the count needs their spans);
    those lowerings are weighed against OP_CACHE_BYTES then and there, not kept until a plan passes (a red
    team's tiling search, 90 refusals in 100 steps, held 2 GB)."""
    g = graphs["mlp-tiny"]
    monkeypatch.setattr(tasks, "OP_CACHE_BYTES", 1)
    cache = tasks._op_cache(g)
    cache.ops.clear()
    tasks.lower(g, {"silu_mul": 2}, 8)                 # passes: its own lowerings stay while in use
    assert cache.ops
    monkeypatch.setattr(tasks, "MAX_DEPENDENCIES", 1)
    # (the count of whole reads before lowering, _check_whole_reads, would refuse this one first: the count
    # after it is what a plan of partial reads meets)
    monkeypatch.setattr(tasks, "_check_whole_reads", lambda *a: None)
    with pytest.raises(tasks.DependencyLimitError):
        tasks.lower(g, {"silu_mul": 1, "down_proj": 1}, 8)
    assert not cache.ops                               # the refused plan's lowerings, and the older ones, let go


# ---------------------------------------------------------------------------------------
# every adversarial action, through the env's step


LONG_BODY = "{ float v = (float)lo; v = v * 2.0f + 1.0f; }\n" * 400

CASES = [
    # (name, action, "refused" | "accepted", what the feedback says)
    ("200 stars", "tile " + "*" * 200 + "Q n=64", "refused", "matches no op"),
    ("14 stars", "tile " + "*" * 14 + "Q n=64", "refused", "matches no op"),
    ("stars between letters", "assign " + "*p*r*o*j" * 4 + "*Q sms=0-1", "refused", "matches no op"),
    ("119k-character pattern", "tile " + "*x" * 59_000 + " n=64", "refused", "matches no op"),
    ("3,000 numbers in a pattern", "assign " + "{i}" * 3000 + " sms=0-1", "refused", "matches no op"),
    ("Arabic-Indic digits", "assign * sms=٠-٩", "refused", "U+0660"),
    ("fullwidth digits", "tile down_proj n=６４", "refused", "U+FF16"),
    ("Devanagari digit", "prefetch down_proj depth=३", "refused", "U+0969"),
    ("huge tile", "tile * n=999999999", "refused", "does not fit"),
    ("huge split", "split * n=999999999", "refused", "out of range"),
    ("huge SM range", "assign * sms=0-999999999", "refused", "outside the chip"),
    ("huge prefetch", "prefetch * depth=999999999", "refused", "out of range"),
    ("huge inflight", "inflight * n=999999999", "refused", "out of range"),
    ("ten digits", "tile down_proj n=1234567890", "refused", "expected `tile OP n=SIZE`"),
    ("1,000 assigns", "\n".join(["assign * sms=0-131"] * 1000), "accepted", "valid schedule"),
    ("1,000 orders", "\n".join(["order up_proj before gate_proj", "order up_proj after gate_proj"] * 500),
     "accepted", "valid schedule"),
    ("1,000 counters", "\n".join(["counter * op", "counter * tile"] * 500), "accepted", "valid schedule"),
    ("1,000 tiles", "\n".join(["tile *_proj n=64", "tile silu_mul n=128"] * 500), "accepted", "valid schedule"),
    ("1,001 edits", "\n".join(["counter * op"] * 1001), "refused", "more than 1000 edits"),
    ("huge impl on a pattern", "impl *_proj <<<" + LONG_BODY * 2 + ">>>", "refused", "characters"),
    ("n=1 everywhere", "tile * n=1", "refused", "task dependencies, over the limit"),
    ("n=1 on the two that multiply", "tile down_proj n=1\ntile silu_mul n=2", "refused", "task dependencies"),
    ("honest neighbour", "tile down_proj n=64\nfuse gate_proj into silu_mul", "accepted", "valid schedule"),
]

_CHILD = r"""
import json, resource, sys, time
from megakernel_gym.env.megakernel import MegaKernelEnv
cases = json.load(sys.stdin)
env = MegaKernelEnv(backend="sim")
env.reset(seed=0, options={"problem": "mk_mlp_block"})
env.step("tile down_proj n=64")          # the first step's imports and caches
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # noqa: E731
base = peak()
for name, text in cases:
    env.reset(seed=0, options={"problem": "mk_mlp_block"})
    c, w = time.process_time(), time.perf_counter()
    obs, reward, term, trunc, info = env.step(text)
    print(json.dumps({"name": name, "cpu_s": time.process_time() - c, "wall_s": time.perf_counter() - w,
                      "status": info["eval"]["status"], "reason": info["eval"]["reason"][:600],
                      "reward": reward, "code_chars": len(obs["code"])}), flush=True)
print(json.dumps({"peak_growth_mb": (peak() - base) / 2 ** 20}))
"""


def test_every_adversarial_action_is_answered_within_a_second_and_bounded_memory():
    """On the 1B-shaped MLP block (hidden 2048, ffn 8192), in a process of its own (so its peak
    memory is its own): each action through MegaKernelEnv.step, sim backend. A refusal is a
    compile_error (the failure reward), an honest neighbour is scored; each within 1 s of CPU."""
    r = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([(n, t) for n, t, _, _ in CASES]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    by_name = {row["name"]: row for row in rows if "name" in row}
    for name, _, want, says in CASES:
        row = by_name[name]
        assert row["status"] == ("compile_error" if want == "refused" else "correct"), (name, row)
        assert says in row["reason"], (name, row["reason"])
        assert row["cpu_s"] < 1.0, (name, row)
        if want == "refused":
            assert row["reward"] == -1.0      # the failure score, from the default schedule's 0
    assert rows[-1]["peak_growth_mb"] < 512, rows[-1]


def test_the_whole_read_count_never_passes_the_dependencies_built(graphs):
    """What refuses a plan before lowering is a lower bound: random valid schedules of the tiny zoo
    models (tiles, fusions, inlined norms, splits) never build fewer dependencies than it counts."""
    from megakernel_gym.ir_exposure.edits import random_edit
    rng = random.Random(11)
    for name, g in graphs.items():
        ir = make_ir(g, num_sms=8)
        for _ in range(25):
            try:
                ir = apply_edits(ir, random_edit(ir, rng))
            except EditError:
                continue
            k = ir.knobs
            tg = tasks.lower(g, k.tiles, k.num_sms, ir.fused, k.splits)
            per_pair, _ = tasks._whole_read_dependencies(tasks._op_cache(g), tg.tiling, ir.fused,
                                                          {a: n for a, n in k.splits.items() if n != 1})
            assert sum(per_pair.values()) <= len(tasks.dep_edges(tg)[0]), (name, k, ir.fused)
