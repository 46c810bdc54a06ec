"""Lowering, plans and the validator. The adversarial test mutates valid plans at random and
checks the validator against an independent execution of each plan (the VM's scheduler under
adversarial interleavings): zero false accepts, and the default plans are all accepted."""
import copy
import random

import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.schedule import Counter, build_plan, default_knobs
from megakernel_gym.compiler.tasks import INLINE, TilingError, box_to_spans, lower
from megakernel_gym.compiler.validate import ScheduleError, check, validate
from megakernel_gym.compiler.vm import simulate

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]


def test_box_to_spans():
    assert box_to_spans((2, 64), ((0, 2), (8, 16))) == ((8, 16), (72, 80))
    assert box_to_spans((2, 4, 16), ((0, 2), (1, 3), (0, 16))) == ((16, 48), (80, 112))
    assert box_to_spans((4, 8), ((0, 4), (0, 8))) == ((0, 32),)      # whole tensor: one run
    assert box_to_spans((4, 8), ((1, 3), (0, 8))) == ((8, 24),)      # full rows merge


def test_tile_dependencies_are_tile_precise(graphs):
    tg = lower(graphs["llama-tiny"], num_sms=8)
    q_proj = [str(tg.tasks[t]) for t in tg.by_op["layers.0.attn.q_proj"]]
    rope0 = tg.by_op["layers.0.attn.q_rope"][0]          # head 0 = columns 0..15 of q_proj
    assert {str(tg.tasks[d]) for d in tg.deps[rope0]} == set(q_proj[:2])
    kw0 = tg.by_op["layers.0.attn.k_cache_write"][0]      # kv head 0 only
    assert {str(tg.tasks[d]) for d in tg.deps[kw0]} == {"layers.0.attn.k_rope[0]"}


def test_bad_tile_size_names_the_allowed_ones(graphs):
    with pytest.raises(TilingError, match=r"q_proj: tile size 7 .* allowed sizes: 1, 2, 4, 8, 16, 32, 64"):
        lower(graphs["llama-tiny"], {"layers.0.attn.q_proj": 7})
    with pytest.raises(TilingError, match="do not exist: nope"):
        lower(graphs["llama-tiny"], {"nope": 8})
    with pytest.raises(TilingError, match="decode_attention"):
        lower(graphs["llama-tiny"], {"layers.0.attn.decode_attention": 1})  # splits a query-head group


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("sms", [1, 3, 8, 132])
def test_default_plans_are_accepted_and_run(graphs, name, sms):
    plan = build_plan(graphs[name], default_knobs(graphs[name], sms))
    assert validate(plan) is plan
    for seed in range(3):
        assert simulate(plan, random.Random(seed)).outcome == "ok"


# -- adversarial plans ------------------------------------------------------------------


def _mutate(plan, rng):
    p = copy.copy(plan)
    p.queues = [list(q) for q in plan.queues]
    p.counters = [Counter(c.id, c.name, list(c.producers)) for c in plan.counters]
    p.waits = {t: list(w) for t, w in plan.waits.items()}
    tasks_with_waits = [t for t, w in p.waits.items() if w]
    nonempty = [s for s, q in enumerate(p.queues) if q]
    kind = rng.choice(["drop_wait", "lower_threshold", "raise_threshold", "swap", "move", "reverse",
                       "drop_producer", "merge_counter", "wait_on_later", "drop_task", "duplicate"])
    if kind == "drop_wait" and tasks_with_waits:
        t = rng.choice(tasks_with_waits)
        p.waits[t].pop(rng.randrange(len(p.waits[t])))
    elif kind in ("lower_threshold", "raise_threshold") and tasks_with_waits:
        t = rng.choice(tasks_with_waits)
        i = rng.randrange(len(p.waits[t]))
        c, thr = p.waits[t][i]
        p.waits[t][i] = (c, thr - 1 if kind == "lower_threshold" else thr + 1)
    elif kind == "swap" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        if len(q) > 1:
            i = rng.randrange(len(q) - 1)
            j = min(len(q) - 1, i + rng.choice([1, 1, 2, 5]))
            q[i], q[j] = q[j], q[i]
    elif kind == "move" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        t = q.pop(rng.randrange(len(q)))
        dst = p.queues[rng.randrange(len(p.queues))]
        dst.insert(rng.randrange(len(dst) + 1), t)
    elif kind == "reverse" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        i = rng.randrange(len(q))
        j = min(len(q), i + rng.randint(2, 6))
        q[i:j] = reversed(q[i:j])
    elif kind == "drop_producer":
        c = rng.choice(p.counters)
        if c.producers:
            c.producers.pop(rng.randrange(len(c.producers)))
    elif kind == "merge_counter":
        # two counters fused into one, waits left at their old thresholds (the classic partial wait)
        a, b = rng.sample(range(len(p.counters)), 2)
        p.counters[a].producers += p.counters[b].producers
        p.counters[b].producers = []
        for t, ws in p.waits.items():
            p.waits[t] = [(a if c == b else c, thr) for c, thr in ws]
    elif kind == "wait_on_later" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        if len(q) > 1:
            i = rng.randrange(len(q) - 1)
            later = q[rng.randrange(i + 1, len(q))]
            owner = next((c for c in p.counters if later in c.producers), None)
            if owner is not None:  # an earlier mutation may have dropped it from every counter
                p.waits.setdefault(q[i], []).append((owner.id, len(owner.producers)))
    elif kind == "drop_task" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        q.pop(rng.randrange(len(q)))
    elif kind == "duplicate" and nonempty:
        q = p.queues[rng.choice(nonempty)]
        dst = p.queues[rng.randrange(len(p.queues))]
        dst.append(rng.choice(q))
    return p, kind


def test_adversarial_plans_zero_false_accepts(graphs):
    rng = random.Random(1234)
    stats = {"accepted": 0, "rejected": 0, "caught_by_sim": 0}
    for i in range(600):
        name = TINY[i % len(TINY)]
        knobs = default_knobs(graphs[name], rng.choice([2, 3, 5, 8]))
        if i % 3 == 1:   # split attention and norms computed on chip in their consumers: the levers' plans too
            g = graphs[name]
            knobs.splits = {o.name: rng.choice([2, 3]) for o in g.ops if o.kind == "decode_attention"}
            knobs.fused = {o.name: INLINE for o in g.ops if o.kind == "rmsnorm" and o.name != "norm"}
        base = build_plan(graphs[name], knobs)
        plan = base
        kinds = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            plan, kind = _mutate(plan, rng)
            kinds.append(kind)
        findings = check(plan)
        sims = [simulate(plan, random.Random(k), adversarial=True).outcome for k in range(12)]
        unsafe_seen = any(o != "ok" for o in sims)
        if findings:
            stats["rejected"] += 1
            assert all(f.message for f in findings)
        else:
            stats["accepted"] += 1
            # a false accept: the validator said safe, an execution found a race or deadlock
            assert not unsafe_seen, (i, kinds, sims)
        if unsafe_seen:
            stats["caught_by_sim"] += 1
            assert findings, (i, kinds)
    # the test has teeth: plenty of mutants are unsafe, and safe ones are not rejected wholesale
    assert stats["rejected"] >= 200 and stats["accepted"] >= 50 and stats["caught_by_sim"] >= 100, stats


def test_rejection_messages_name_op_task_counter(graphs):
    g = graphs["llama-tiny"]
    plan = build_plan(g, default_knobs(g, 16))
    tg = plan.tg
    # drop every wait of one q_rope task whose producers run on other SMs: they go missing
    sm = plan.sm_of()
    t = next(t for t in tg.by_op["layers.0.attn.q_rope"] if all(sm[d] != sm[t] for d in tg.deps[t]))
    p = copy.copy(plan)
    p.waits = dict(plan.waits)
    p.waits[t] = []
    with pytest.raises(ScheduleError) as ei:
        validate(p)
    f = ei.value.findings[0]
    assert f.kind == "race" and f.op == "layers.0.attn.q_rope" and "missing producer" in f.message
    assert "layers.0.attn.q_proj[" in f.message and "wait on counter layers.0.attn.q_proj[" in f.message
    # a wait on a task that runs later on the same SM: a cycle, spelled out
    p = copy.copy(plan)
    p.queues = [list(q) for q in plan.queues]
    p.waits = {k: list(v) for k, v in plan.waits.items()}
    q = next(q for q in p.queues if len(q) > 2)
    first, later = q[0], q[-1]
    owner = next(c for c in plan.counters if later in c.producers)
    p.waits[first].append((owner.id, 1))
    f = check(p)[0]
    assert f.kind == "deadlock" and "deadlock cycle" in f.message and f"waits on counter {owner.name}" in f.message
    # a threshold no one can reach, and a partial wait
    p = copy.copy(plan)
    p.waits = {k: list(v) for k, v in plan.waits.items()}
    c, thr = p.waits[t][0]
    p.waits[t][0] = (c, thr + 1)
    f = check(p)[0]
    assert f.kind == "deadlock" and "only 1 task(s)" in f.message and f.counter
    plan_op = build_plan(g, default_knobs(g, 4).__class__(num_sms=4, counters={"layers.0.attn.q_proj": "op"}))
    validate(plan_op)  # op-level counter waited on in full is fine
    p = copy.copy(plan_op)
    p.waits = {k: [(c, 1) for c, _ in v] for k, v in plan_op.waits.items()}
    assert any(f.kind == "partial_wait" and "layers.0.attn.q_proj" in f.message for f in check(p))


def test_1b_shaped_model_plans_and_validates():
    m, inputs = ZOO["llama-1b"](device="meta")
    g = capture(m, inputs, "llama-1b")
    plan = build_plan(g, default_knobs(g, 132))
    assert len(plan.tg.tasks) > 5000
    assert check(plan) == []


def test_lowering_is_reused_for_the_same_tiles_sm_count_and_fusions_only(graphs):
    """build_plan reuses a lowered task graph when the knobs lowering reads (tile sizes, SM count,
    fusions) are the same, whatever else differs; a new tile size lowers again, exactly as lower does."""
    import copy as _copy
    g = graphs["llama-tiny"]
    k = default_knobs(g)
    a = build_plan(g, k)
    other = default_knobs(g)
    other.sms["lm_head"] = (0, 3)
    other.counters["lm_head"] = "op"
    b = build_plan(g, other)
    assert b.tg is a.tg and b.queues != a.queues
    axis, extent, size = a.tg.tiling["lm_head"]
    retiled = default_knobs(g)
    retiled.tiles["lm_head"] = next(s for s in (size * 2, size // 2, extent) if s and extent % s == 0 and s != size)
    c = build_plan(g, retiled)
    fresh = lower(g, retiled.tiles, retiled.num_sms, retiled.fused)
    assert c.tg is not a.tg and c.tg.deps == fresh.deps
    assert [(t.op, t.tile) for t in c.tg.tasks] == [(t.op, t.tile) for t in fresh.tasks]
    assert build_plan(_copy.deepcopy(g), k).tg is not a.tg     # another graph object lowers on its own
