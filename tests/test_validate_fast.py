"""The validator's fast path (compiler/validate.check: a verdict at array speed where every
dependency is ordered by one edge and scipy's strongly connected components find no cycle; else
counters as graph nodes, one-edge orderings first, the transitive closure only for what is left) against the full re-validation it replaced
(check_full: every wait an edge from each producer, the closure for every dependency): the same
findings, in the same order, on 1,000 random edit scripts that build a plan (the plan mutated
after the edits in half of them, so unsafe plans reach both), on the adversarial mutants, and on the 1B model's
schedules. Zero false accepts rests on check_full, which test_compiler_schedule checks against
the VM's adversarial executions."""
import random

import pytest
from test_compiler_schedule import _mutate

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.schedule import build_plan
from megakernel_gym.compiler.validate import _proven_safe, check, check_counters, check_full
from megakernel_gym.ir_exposure import IR, make_ir, tuned_edits
from megakernel_gym.ir_exposure.edits import _apply, _State, parse_edits, random_edit
from megakernel_gym.policies.expert import expert_edits

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]


def unvalidated_plan(ir, text: str):
    """The plan the edits' knobs build, before the validator sees it (None where the edit
    language itself refuses the edits or the knobs build no plan)."""
    st = _State(ir)
    try:
        for e in parse_edits(text):
            _apply(st, e)
        new = IR(ir.graph, st.knobs, st.fused, st.impls)
        knobs = new.knobs.copy()
        knobs.fused = dict(new.fused)
        return build_plan(new.graph, knobs)
    except Exception:   # the edit refused (_Reject), an invalid IR, or knobs that build no plan
        return None


def test_the_fast_check_finds_what_the_full_one_does_on_1000_random_edit_scripts(graphs):
    rng = random.Random(16)
    kinds = {"safe": 0, "unsafe": 0, "refused": 0, "proven at array speed": 0}
    for i in range(5000):
        if kinds["safe"] + kinds["unsafe"] == 1000:
            break
        name = TINY[i % len(TINY)]
        ir = make_ir(graphs[name], num_sms=rng.choice([2, 4, 8]))
        script = "\n".join(random_edit(ir, rng) for _ in range(rng.randint(1, 4)))
        plan = unvalidated_plan(ir, script)
        if plan is None:
            kinds["refused"] += 1
            continue
        if i % 2:
            plan, _ = _mutate(plan, rng)
        fast, full = check(plan), check_full(plan)
        assert fast == full, (i, script, fast[:2], full[:2])
        kinds["unsafe" if full else "safe"] += 1
        if not full:
            kinds["proven at array speed"] += _proven_safe(plan)
        elif not check_counters(plan):   # an unsafe plan the array verdict is asked about: never proven
            assert not _proven_safe(plan), (i, script, full[:2])
    # 1,000 edit scripts reached both checks (the edit language refused the others), and the fuzz
    # has teeth: both verdicts, many times over
    assert kinds["safe"] + kinds["unsafe"] == 1000 and kinds["safe"] >= 300 and kinds["unsafe"] >= 300, kinds
    # and the array verdict is the one that answers for nearly every safe plan
    assert kinds["proven at array speed"] >= 0.9 * kinds["safe"], kinds


@pytest.mark.parametrize("schedule", ["default", "tuned", "expert"])
def test_the_fast_check_finds_what_the_full_one_does_on_the_1b_model(schedule):
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    text = {"default": "", "tuned": tuned_edits(base), "expert": expert_edits(base)}[schedule]
    plan = unvalidated_plan(base, text) if text else base.plan()
    assert check(plan) == check_full(plan) == [] and _proven_safe(plan)
    rng = random.Random(3)
    for _ in range(2):   # unsafe 1B plans: the same findings too
        bad, _ = _mutate(plan, rng)   # it copies what it changes
        found = check_full(bad)
        assert check(bad) == found
        assert not found or check_counters(bad) or not _proven_safe(bad)


def test_the_collector_is_paused_only_while_a_pass_runs_and_comes_back_after_an_error():
    import gc

    from megakernel_gym.compiler.pause_gc import gc_paused

    seen = []

    @gc_paused
    def pass_(fail: bool):
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("bad plan")
        return 7

    assert gc.isenabled()
    assert pass_(False) == 7 and gc.isenabled()
    with pytest.raises(ValueError, match="bad plan"):
        pass_(True)
    assert gc.isenabled() and seen == [False, False]
    gc.disable()
    try:          # a caller that had it off keeps it off
        pass_(False)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_array_verdict_sees_a_cycle_behind_a_repeated_wait_and_leaves_odd_waits_to_the_full_check(graphs):
    """A wait repeated 256 times still closes its cycle (the graph's entries sum, and no count of
    repeats wraps to zero); a waiter that is no task, or a wait that is not a (counter, threshold)
    pair, is left to the edge-by-edge check, which says what the full check says."""
    import copy
    plan = build_plan(graphs["llama-tiny"], make_ir(graphs["llama-tiny"], num_sms=4).knobs)
    q = plan.queues[0]
    cid = next(c.id for c in plan.counters if q[-1] in c.producers)
    bad = copy.copy(plan)
    bad.waits = {t: list(w) for t, w in plan.waits.items()}
    bad.waits[q[0]] = bad.waits[q[0]] + [(cid, len(plan.counters[cid].producers))] * 256
    assert not _proven_safe(bad)
    assert [f.kind for f in check(bad)][:1] == ["deadlock"] and check(bad) == check_full(bad)
    stranger = copy.copy(plan)
    stranger.waits = dict(plan.waits)
    stranger.waits[len(plan.tg.tasks) + 5] = [(cid, len(plan.counters[cid].producers))]
    assert _proven_safe(plan) and not _proven_safe(stranger)
    odd = copy.copy(plan)
    odd.waits = dict(plan.waits)
    t = next(t for t, w in plan.waits.items() if w)
    odd.waits[t] = [tuple(plan.waits[t][0]) + (0,)]
    assert not _proven_safe(odd)


def test_build_plans_wait_arrays_are_trusted_only_until_the_waits_are_handed_out(graphs):
    """check reads build_plan's own wait arrays (schedule.trusted_waits) instead of plan.waits; once
    anyone has been given plan.waits (or set it), the arrays no longer speak for the plan, so a
    change made through it is what the validator sees."""
    import copy

    from megakernel_gym.compiler.schedule import trusted_waits
    g = graphs["llama-tiny"]
    ir = make_ir(g, num_sms=8)
    plan = build_plan(g, ir.knobs)
    assert trusted_waits(plan) is not None and check(plan) == []
    other = copy.copy(plan)                      # a copy's waits set anew: not build_plan's
    other.waits = {t: list(w) for t, w in plan.waits.items()}
    assert trusted_waits(other) is None
    fresh = build_plan(g, ir.knobs)              # the arrays as a dict: the waits build_plan always made
    arrays = trusted_waits(fresh)
    waits = fresh.waits
    assert trusted_waits(fresh) is None
    assert sum(map(len, waits.values())) == len(arrays[0]) and set(waits) == set(range(len(fresh.tg.tasks)))
    t = next(t for t, w in waits.items() if w)
    waits[t].clear()                             # dropped through the dict handed out: a race, found
    assert any(f.kind == "race" for f in check(fresh))
    # the counters and waits a cached op order and counter modes give are a new plan's own objects
    again = build_plan(g, ir.knobs)
    assert again.counters is not fresh.counters and again.counters[0] is not fresh.counters[0]
    assert again.waits == plan.waits and check(again) == []
