"""The kernel's code in the sim (issue 39): codegen.function_calls names the device functions each op's
tasks run, exactly as emit_cuda shares them, and costmodel.cold_code charges the first op in the step
to call each one (on an H200, Qwen3-0.6B's expert ran 3.6% / 8.4% / 16.9% slower with layer 0 / 0-1 /
0-3 in functions of their own, the same schedule and bits: ab_knobs_distinct.json)."""
from dataclasses import replace

import numpy as np
import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler import costmodel
from megakernel_gym.compiler.codegen import emit_cuda, function_calls
from megakernel_gym.compiler.costmodel import DEVICES, cold_code, predict
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits


@pytest.fixture(scope="module")
def qwen3():
    base = make_ir(capture(*ZOO["qwen3-tiny"](), "qwen3-tiny"), num_sms=8)
    return base, apply_edits(base, expert_edits(base))


def partition(ids: dict) -> list:
    groups: dict = {}
    for op, fid in ids.items():
        groups.setdefault(fid, set()).add(op)
    return sorted(sorted(g) for g in groups.values())


L1 = "model.layers.1."
SCHEDULES = {
    "default": None, "expert": "",
    # one layer's own bodies: a norm fused into its rope (the attention runs it as a call), an ahead cap
    "fuse one layer": f"fuse {L1}self_attn.k_norm into {L1}self_attn.rope_1",
    "ahead on one op": f"ahead {L1}self_attn.o_proj n=2",
    # a tile size is the body's bounds, not its text: one function for every layer's
    "tile one layer": f"tile {L1}mlp.down_proj n=16",
    "fuse every layer": "fuse model.layers.*.self_attn.k_norm into model.layers.*.self_attn.rope_1",
}


@pytest.mark.parametrize("label", list(SCHEDULES))
def test_function_calls_share_functions_as_emit_cuda_does(qwen3, label):
    base, expert = qwen3
    edits = SCHEDULES[label]
    plan = (base if edits is None else apply_edits(expert, edits) if edits else expert).plan()
    calls = function_calls(plan)
    _, table = emit_cuda(plan)
    # every op's own call runs the function emit_cuda gave it, and the ops that share one agree
    own = {op: ids[-1] for op, ids in calls.items()}
    assert partition(own) == partition({op: table.op_ids[op] for op in own})
    # every task's calls, prologue calls first, are the table's calls for that task: one function
    # of emit_cuda's for each of function_calls' ids, and the other way round
    pairs = set()
    for op, ids in calls.items():
        for t in plan.tg.by_op[op]:
            got = table.call_op[table.call_start[t]:table.call_start[t + 1]]
            assert len(got) == len(ids)
            pairs |= set(zip(ids, got))
    assert len({a for a, _ in pairs}) == len({b for _, b in pairs}) == len(pairs)


def test_distinct_ops_gives_each_named_op_a_function(qwen3):
    _, expert = qwen3
    plan = expert.plan()
    plain = function_calls(plan)
    own = function_calls(plan, distinct_ops=r"layers\.0\.")
    assert len({f for ids in own.values() for f in ids}) > len({f for ids in plain.values() for f in ids})
    assert partition({op: ids[-1] for op, ids in own.items()}) == partition(
        emit_cuda(plan, distinct_ops=r"layers\.0\.")[1].op_ids)


def test_cold_code_charges_the_first_op_to_call_each_function_once_per_sm(qwen3):
    base, expert = qwen3
    for ir in (base, expert):
        plan = ir.plan()
        cold = cold_code(plan)
        calls = function_calls(plan)
        functions = {f for ids in calls.values() for f in ids}
        # every function is charged on at least one SM, at most on every SM, and only in its first op
        assert len(functions) <= cold.sum() <= len(functions) * plan.num_sms
        first = {}
        for op in calls:        # graph order: tasks are lowered op by op
            for f in calls[op]:
                first.setdefault(f, op)
        charged = {plan.tg.tasks[t].op for t in np.flatnonzero(cold)}
        assert charged <= set(first.values())
        # a layer's ops after the first call nothing cold: layer 1 shares layer 0's functions
        assert not any(op.startswith(L1) for op in charged)


def test_a_layer_with_bodies_of_its_own_costs_its_code_and_the_next_layers(qwen3):
    """An edit on one layer's op that changes its body's text gives it a function of its own: the sim
    charges that function's first calls, and the next layer's, which now calls the shared one first.
    A tile on one layer (its bounds, not its text) keeps one function for all layers and costs no
    cold code, and the same fusion on every layer costs less than on one (the honest schedules beside
    the per-layer ones)."""
    _, expert = qwen3
    dev = DEVICES["H200"]
    bare = replace(dev, cold_code_us=0.0, cold_code_kchar_us=0.0)
    e = expert.plan()
    for label in ("fuse one layer", "ahead on one op"):
        p = apply_edits(expert, SCHEDULES[label]).plan()
        assert cold_code(p).sum() > cold_code(e).sum(), label
        extra = predict(p, dev).latency_us - predict(p, bare).latency_us
        assert extra > predict(e, dev).latency_us - predict(e, bare).latency_us + dev.cold_code_us, label
    tile = apply_edits(expert, SCHEDULES["tile one layer"]).plan()
    assert cold_code(tile).sum() == cold_code(e).sum()
    # the fusion on every layer runs the attention's producers as calls of their own (more code than
    # the expert's absorbed attention), but once for all layers: less than on one layer
    every, one = (apply_edits(expert, SCHEDULES[k]).plan() for k in ("fuse every layer", "fuse one layer"))
    assert cold_code(e).sum() < cold_code(every).sum() < cold_code(one).sum()


def test_cold_code_is_kept_per_split_and_ahead_knobs(qwen3):
    """The function calls are cached on the task graph, keyed by the plan's knobs that a body's text
    reads (splits and ahead caps): two plans over one task graph with other caps get their own."""
    _, expert = qwen3
    plan = expert.plan()
    first = cold_code(plan).copy()
    capped = apply_edits(expert, f"ahead {L1}self_attn.o_proj n=2").plan()
    capped.tg = plan.tg          # the same tasks; only the knobs differ
    assert cold_code(capped).sum() > first.sum()
    assert len(plan.tg.__dict__["_function_calls"]) == 2
    assert np.array_equal(cold_code(plan), first)
    assert "cold_code" in costmodel.__all__


def test_predict_prices_the_distinct_ops_probe_by_its_code(qwen3):
    """predict(distinct_ops=) prices emit_cuda's probe of that name: layer 0 in functions of its own
    calls more functions first, so the step reads slower by whole cold-code charges, and the plain
    prediction (and its cache entry) stays what it was."""
    _, expert = qwen3
    plan = expert.plan()
    dev = DEVICES["H200"]
    plain = predict(plan, dev).latency_us
    probe = predict(plan, dev, distinct_ops=r"layers\.0\.").latency_us
    extra = cold_code(plan, r"layers\.0\.").sum() - cold_code(plan).sum()
    assert extra >= 1
    assert probe > plain
    assert predict(plan, dev).latency_us == plain
    free = replace(dev, cold_code_us=0.0, cold_code_kchar_us=0.0)   # with no cold code the probe is the same schedule
    assert predict(plan, free, distinct_ops=r"layers\.0\.").latency_us == predict(plan, free).latency_us


def test_a_shared_functions_first_call_is_priced_apart_from_one_ops_own(qwen3):
    """shared_code_kchar_us prices the first call of a function more than one op calls (every layer's shared
    body: its first call is once on the step's path, in layer 0), cold_code_kchar_us that of a function one op
    calls alone (a body of one layer's own, the lm_head's). A layer given bodies of its own pays its own first
    calls at cold_code_kchar_us whatever the shared rate, so what such an edit costs over the schedule it came
    from does not fall with the shared rate (issue 39: on an H200 llama-1b's layer 0 ran ~10 us longer than its
    steady layers, where 0.8 us per 1,000 characters of its shared bodies read 24; and making one layer's bodies
    its own cost more than the sim said, ab_knobs_distinct_llama.json)."""
    from megakernel_gym.compiler.codecost import _first_calls, first_call_us, shared_calls
    _, expert = qwen3
    dev = replace(DEVICES["H200"], cold_code_us=0.0, cold_code_kchar_us=1.0)
    one_layer = apply_edits(expert, f"fuse {L1}self_attn.k_norm into {L1}self_attn.rope_1").plan()
    cost = {}
    for label, plan in (("expert", expert.plan()), ("one layer", one_layer)):
        tasks, fids, chars = _first_calls(plan)
        callers = shared_calls(plan)
        own = float(chars[fids][callers[fids] == 1].sum()) / 1e3
        shared = float(chars[fids][callers[fids] > 1].sum()) / 1e3
        assert shared > 0
        for rate in (0.0, 0.3, 1.0):
            got = float(np.sum(first_call_us(plan, replace(dev, shared_code_kchar_us=rate))))
            assert got == pytest.approx(own + rate * shared)
            cost[label, rate] = got
        assert np.sum(first_call_us(plan, replace(dev, shared_code_kchar_us=None))) == pytest.approx(own + shared)
    # the layer of its own adds functions only it calls, priced at the one-op rate at every shared rate
    extra = {rate: cost["one layer", rate] - cost["expert", rate] for rate in (0.0, 0.3, 1.0)}
    assert extra[0.0] > 0 and extra[0.3] >= extra[1.0] - 1e-9
