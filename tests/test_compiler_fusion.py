"""Fusion: a fused producer gets no tasks; its consumers compute the part they read in a
prologue, read the producer's inputs instead, and wait on the producer's producers. The VM
result is unchanged, the task count drops, and the sim backend sees the saved syncs."""
import pytest
import torch

from megakernel_gym.compiler import ZOO, build_plan, capture, check, module_tensors, predict, run_plan
from megakernel_gym.compiler.schedule import default_knobs
from megakernel_gym.ir_exposure import apply_edits, make_ir


@pytest.fixture(scope="module")
def tiny():
    m, inputs = ZOO["llama-tiny"]()
    return m, inputs, capture(m, inputs, "llama-tiny")


def _consumer(g, op):
    out = g.op(op).outputs[0]
    return next(c.name for c in g.ops if out in c.inputs)


def test_fused_plan_matches_eager_with_fewer_tasks(tiny):
    m, inputs, g = tiny
    k = default_knobs(g, 8)
    base_tasks = len(build_plan(g, k).tg.tasks)
    k.fused = {o.name: _consumer(g, o.name) for o in g.ops if o.kind == "rmsnorm"}
    k.fused["layers.1.mlp.silu_mul"] = "layers.1.mlp.down_proj"
    plan = build_plan(g, k)
    assert check(plan) == []
    assert len(plan.tg.tasks) < base_tasks
    assert all(plan.tg.by_op[a] == [] for a in k.fused)
    down = plan.tg.tasks[plan.tg.by_op["layers.1.mlp.down_proj"][0]]
    assert [p for p, _ in down.prologue] == ["layers.1.mlp.silu_mul"]
    # the consumer now waits on the fused op's producers (gate/up projections)
    assert {plan.tg.tasks[d].op for d in plan.tg.deps[down.id]} == {"layers.1.mlp.gate_proj", "layers.1.mlp.up_proj"}
    want = m(*inputs)
    for seed in range(4):
        got = run_plan(plan, module_tensors(m), dict(zip(g.inputs, inputs)), rng=seed, adversarial=True)
        assert torch.allclose(got[g.outputs[0]], want, atol=1e-5)


def test_fuse_edit_changes_the_plan_and_the_prediction(tiny):
    m, inputs, g = tiny
    ir = make_ir(g, num_sms=8)
    fused = apply_edits(ir, "fuse layers.0.mlp.silu_mul into layers.0.mlp.down_proj")
    assert len(fused.plan().tg.tasks) < len(ir.plan().tg.tasks)
    assert predict(fused.plan()).latency_us != predict(ir.plan()).latency_us
    got = run_plan(fused.plan(), module_tensors(m), dict(zip(g.inputs, inputs)), rng=1)
    assert torch.allclose(got[g.outputs[0]], m(*inputs), atol=1e-5)


def test_fusing_norms_in_the_1b_shaped_model_is_valid_and_priced():
    m, inputs = ZOO["llama-1b"](device="meta")
    g = capture(m, inputs, "llama-1b")
    k = default_knobs(g, 132)
    base_plan = build_plan(g, k)
    base = predict(base_plan)
    k.fused = {o.name: _consumer(g, o.name) for o in g.ops if o.kind == "rmsnorm"}
    plan = build_plan(g, k)
    assert check(plan) == []
    assert len(plan.tg.tasks) < len(base_plan.tg.tasks)
    # every consumer task redoes its norm: the model weighs that work against the task and the hop
    # saved (on an H100 the on-chip form of this lever, `inline`, measured neutral: megakernel_levers.json)
    assert predict(plan).latency_us != base.latency_us
