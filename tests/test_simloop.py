"""The sim's compiled parts: the cost model's list schedule (compiler/simloop.py) compiled by numba
agrees to the bit with the same function run as Python, on the 1B model's schedules and under both
hop kinds, and finds a deadlock as the Python loop does; build_plan's counters are arrays until
someone asks for plan.counters, and from then on the list is what the validator reads."""
import copy
import random

import numpy as np
import pytest

from megakernel_gym.compiler import ZOO, capture, simloop
from megakernel_gym.compiler.costmodel import DEVICES, _queue_csr, _wait_csr, predict
from megakernel_gym.compiler.schedule import Counter, build_plan, counter_count, trusted_counters
from megakernel_gym.compiler.validate import check, check_full
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits

needs_numba = pytest.mark.skipif(not simloop.COMPILED, reason="numba is not installed")


@pytest.fixture(scope="module")
def big():
    return make_ir(capture(*ZOO["llama-1b"](device="meta"), "llama-1b"), num_sms=132)


@pytest.fixture(scope="module")
def tiny():
    return make_ir(capture(*ZOO["llama-tiny"](), "llama-tiny"), num_sms=8)


def _same(a, b):
    assert a.latency_us == b.latency_us and a.busy_us == b.busy_us
    assert a.start_us == b.start_us and a.finish_us == b.finish_us and a.preloaded == b.preloaded


@needs_numba
@pytest.mark.parametrize("schedule", ["default", "tuned", "expert"])
def test_compiled_and_python_list_schedules_agree_to_the_bit_on_the_1b_model(big, schedule, monkeypatch):
    ir = {"default": big, "tuned": apply_edits(big, tuned_edits(big)), "expert": apply_edits(big, expert_edits(big))}[
        schedule]
    plan = ir.plan()
    for hops in ("ll", "counters"):
        for dev in ("H100", "H200"):
            fast = predict(plan, dev, hops=hops)
            monkeypatch.setattr(simloop, "COMPILED", False)
            slow = predict(plan, dev, hops=hops)
            monkeypatch.setattr(simloop, "COMPILED", True)
            _same(fast, slow)
            assert fast.latency_us > fast.floor_us > 0


@needs_numba
def test_a_deadlocked_queue_is_found_by_both_runs(tiny):
    plan = tiny.plan()
    bad = copy.copy(plan)
    bad.queues = [list(q) for q in plan.queues]
    # the first SM runs a task that waits on something before whatever it depends on can run
    dep = next(t for q in bad.queues for t in q if plan.tg.deps.get(t))
    producer = min(plan.tg.deps[dep])
    for q in bad.queues:
        if producer in q:
            q.remove(producer)
    sm = next(s for s, q in enumerate(bad.queues) if dep in q)
    bad.queues[sm].insert(bad.queues[sm].index(dep) + 1, producer)   # the producer after its consumer
    dev = DEVICES["H100"]
    args = None
    for compiled in (True, False):
        need, add, gsize = _wait_csr(bad, "ll")
        n = len(bad.tg.tasks)
        ones = np.ones(n)
        out = simloop.list_schedule(_queue_csr(bad), need, add, gsize, ones, ones, np.zeros(n), np.zeros(n), ones,
                                    ones, ones, dev.wait_latency_us, 1.0, 2.0, compiled=compiled)
        assert out[4] > 0                          # tasks left that never started
        if args is None:
            args = out
        else:
            for a, b in zip(args[:4], out[:4]):
                assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="deadlocks"):
        predict(bad, "H100")
    assert [f.kind for f in check(bad)][:1] == ["deadlock"]


def test_the_python_run_is_the_reference_without_numba(tiny):
    """list_schedule(compiled=False) runs on plain lists: the sim works where numba is missing."""
    plan = tiny.plan()
    need, add, gsize = _wait_csr(plan, "ll")
    n = len(plan.tg.tasks)
    rng = np.random.default_rng(0)
    terms = [rng.uniform(1, 5, n) for _ in range(7)]
    start, finish, pre, busy, left = simloop.list_schedule(_queue_csr(plan), need, add, gsize, *terms, 0.5, 16.0,
                                                           64.0, compiled=False)
    assert left == 0 and (finish > start).all() and len(busy) == 8
    # every task starts after its SM's previous task and after the groups it waits on (plus latency)
    for q in plan.queues:
        for a, b in zip(q, q[1:]):
            assert start[b] >= finish[a]
    for t, deps in plan.tg.deps.items():
        for p in deps:
            assert start[t] >= finish[p] + 0.5 - 1e-9


def test_build_plans_counters_are_arrays_until_handed_out(tiny):
    """check and predict read build_plan's counter arrays; plan.counters builds the list on first use,
    and from then on a change made through it is what the validator sees."""
    plan = build_plan(tiny.graph, tiny.knobs)
    assert trusted_counters(plan) is not None and plan.__dict__.get("_counters") is None
    assert check(plan) == [] and predict(plan, "H100").latency_us > 0
    assert plan.__dict__.get("_counters") is None            # neither needed the list
    n = counter_count(plan)
    counters = plan.counters
    assert trusted_counters(plan) is None and len(counters) == n == counter_count(plan)
    lens, prods = build_plan(tiny.graph, tiny.knobs).counter_arrays[1:]
    assert [len(c.producers) for c in counters] == lens.tolist()
    assert [p for c in counters for p in c.producers] == prods.tolist()
    assert all(c.id == i for i, c in enumerate(counters))
    victim = next(c for c in counters if c.producers)
    victim.producers.pop()                                  # a producer dropped through the list: found
    assert check(plan) == check_full(plan) != []
    # a new plan of the same knobs is untouched (the arrays are shared and read-only)
    again = build_plan(tiny.graph, tiny.knobs)
    assert check(again) == [] and again.counters[victim.id].producers != victim.producers
    with pytest.raises(ValueError):
        again.counter_arrays[2][0] = 1


def test_a_validator_verdict_kept_for_the_waits_is_not_reused_for_other_counters(tiny):
    """The verdicts that read no queue are kept per wait arrays; a plan that shares build_plan's wait
    arrays but whose counters were changed is checked anew, with the full check's findings."""
    rng = random.Random(5)
    plan = build_plan(tiny.graph, tiny.knobs)
    assert check(plan) == []
    for _ in range(20):
        other = build_plan(tiny.graph, tiny.knobs)
        assert other.wait_arrays[0] is plan.wait_arrays[0]   # the same (kept) waits
        counters = [Counter(c.id, c.name, list(c.producers)) for c in other.counters]
        a, b = rng.sample(range(len(counters)), 2)
        counters[a].producers += counters[b].producers       # merged: every wait on `a` is now partial
        counters[b].producers = []
        other.counters = counters
        assert check(other) == check_full(other) != []


@needs_numba
def test_per_task_hops_agree_compiled_and_as_python_and_one_number_is_every_task_alike(big, monkeypatch):
    """list_schedule's `hop` (costmodel.hop_us): per task, or one number for all; the expert with
    capped_wait > 0 has hops of two lengths, and both runs agree to the bit."""
    from dataclasses import replace

    from megakernel_gym.compiler.costmodel import hop_us
    plan = apply_edits(big, expert_edits(big)).plan()
    dev = replace(DEVICES["H100"], capped_wait=0.5)
    assert len(set(hop_us(plan, dev).tolist())) == 2
    fast = predict(plan, dev)
    monkeypatch.setattr(simloop, "COMPILED", False)
    slow = predict(plan, dev)
    monkeypatch.setattr(simloop, "COMPILED", True)
    _same(fast, slow)
    need, add, gsize = _wait_csr(plan, "ll")
    n = len(plan.tg.tasks)
    ones, zeros = np.ones(n), np.zeros(n)
    args = (_queue_csr(plan), need, add, gsize, ones, ones, zeros, zeros, ones, ones, ones)
    one = simloop.list_schedule(*args, 0.7, 1.0, 2.0)
    each = simloop.list_schedule(*args, np.full(n, 0.7), 1.0, 2.0)
    for a, b in zip(one[:4], each[:4]):
        assert np.array_equal(a, b)


def test_a_groups_tail_delays_its_readers_alike_compiled_or_not(tiny):
    """gtail[g]: a wait group's readers see it complete that long past its last producer's signal, in
    the compiled run and the Python reference alike; none given is a tail of 0."""
    plan = tiny.plan()
    need, add, gsize = _wait_csr(plan, "ll")
    n = len(plan.tg.tasks)
    rng = np.random.default_rng(1)
    terms = [rng.uniform(1, 5, n) for _ in range(7)]
    args = (_queue_csr(plan), need, add, gsize, *terms, 0.5, 16.0, 64.0)
    gtail = rng.uniform(0, 3, len(gsize))
    py = simloop.list_schedule(*args, compiled=False, gtail=gtail)
    assert py[4] == 0
    if simloop.COMPILED:
        for a, b in zip(py[:4], simloop.list_schedule(*args, compiled=True, gtail=gtail)[:4]):
            assert np.array_equal(a, b)
    start, finish = py[0], py[1]
    group = {t: need[1][need[0][t]] for t in range(n) if need[0][t + 1] > need[0][t]}
    for t, deps in plan.tg.deps.items():
        if deps:
            assert start[t] >= max(finish[p] for p in deps) + 0.5 + gtail[group[t]] - 1e-9
    none = simloop.list_schedule(*args, compiled=False)
    assert np.array_equal(none[1], simloop.list_schedule(*args, compiled=False, gtail=np.zeros(len(gsize)))[1])
    assert finish.max() > none[1].max()
