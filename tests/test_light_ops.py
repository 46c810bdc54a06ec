"""The light ops' own time and the kernel's code by its size in the sim (issue 39): costmodel.light_tasks
marks each task's small op and the row norms it runs (its own, and each fused one it recomputes, not an
`inline` norm a matmul computes on chip), light_task_us prices them, and cold_code_chars weighs each
first call of a device function by its source (codegen.function_table). On an H200 a default's norm
task ran 3.1-4.8 us where the sim gave it 1.07, and a step's first calls of the small ops cost about
nothing where a flat 5.5 us a call had read llama-1b's layer 0 45 us slow (task_probe_dump0_*.json)."""
from dataclasses import replace

import numpy as np
import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler import costmodel
from megakernel_gym.compiler.codegen import function_calls, function_table
from megakernel_gym.compiler.costmodel import (DEVICES, SMALL_KINDS, _onchip_array, cold_code, cold_code_chars,
                                               first_call_us, light_task_us, light_tasks, predict)
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits

L0 = "model.layers.0."


@pytest.fixture(scope="module")
def qwen3():
    base = make_ir(capture(*ZOO["qwen3-tiny"](), "qwen3-tiny"), num_sms=8)
    return base, apply_edits(base, expert_edits(base))


def kinds(plan):
    k = {o.name: o.kind for o in plan.tg.graph.ops}
    return [k[t.op] for t in plan.tg.tasks]


def test_light_tasks_mark_small_ops_and_norms(qwen3):
    base, _ = qwen3
    plan = base.plan()
    small, own, fused, more_rows = light_tasks(plan)
    ks = kinds(plan)
    assert [bool(s) for s in small] == [k in SMALL_KINDS for k in ks]
    assert [bool(o) for o in own] == [k in ("rmsnorm", "layernorm") for k in ks]
    assert not fused.any()                                    # the default fuses nothing
    assert small.sum() > 0 and own.sum() > 0
    dev = DEVICES["H200"]
    us = light_task_us(plan, dev)
    assert not more_rows.any()                                 # one row a norm task: batch 1
    assert np.allclose(us, dev.small_task_us * small + dev.norm_task_us * own)


def test_a_fused_norm_is_paid_in_every_task_that_recomputes_it(qwen3):
    base, _ = qwen3
    fused = apply_edits(base, f"fuse {L0}self_attn.k_norm into {L0}self_attn.rope_1").plan()
    ids = fused.tg.by_op[f"{L0}self_attn.rope_1"]
    _, _, prologue, _ = light_tasks(fused)
    assert (prologue[ids] == 1).all()
    dev = DEVICES["H200"]
    us = light_task_us(fused, dev)
    # a fused norm has its own price (it cannot start before the input is in), apart from a norm task's
    assert dev.fused_norm_us is not None and dev.fused_norm_us != dev.norm_task_us
    assert np.allclose(us[ids], dev.small_task_us + dev.fused_norm_us)
    assert np.allclose(us[fused.tg.by_op[f"{L0}input_layernorm"]], dev.norm_task_us)
    # with none set, a fused norm costs what a norm task does
    same = replace(dev, fused_norm_us=None)
    assert np.allclose(light_task_us(fused, same)[ids], dev.small_task_us + dev.norm_task_us)


def test_a_norm_task_of_several_rows_pays_for_each_row_past_the_first():
    """norm_row_us: a norm task normalizes its rows one after another. GPT-2 large's ln_2 in one task of
    both batch rows (the expert's two tasks of one) ran 2.2% slower on an H200 (ab_knobs_gpt2_c2.json,
    about 1 us a layer) where the sim, pricing a norm task alike whatever its rows, read it 0.3% faster:
    the adversary's climb 2 from the expert (sim_bisect.json run 17)."""
    base = make_ir(capture(*ZOO["gpt2-tiny"](), "gpt2-tiny"), num_sms=8)
    one, both = base.plan(), apply_edits(base, "tile transformer.h.*.ln_2 n=2").plan()
    dev = DEVICES["H200"]
    assert dev.norm_row_us > 0
    assert not light_tasks(one)[3].any()                       # the default: a task a batch row
    ids = both.tg.by_op["transformer.h.0.ln_2"]
    _, own, _, more_rows = light_tasks(both)
    assert len(ids) == 1 and more_rows[ids[0]] == 1 and own[ids[0]] == 1
    assert more_rows.sum() == len([o for o in both.tg.graph.ops if o.name.endswith(".ln_2")])
    us = light_task_us(both, dev)
    assert us[ids[0]] == pytest.approx(dev.norm_task_us + dev.norm_row_us)
    flat = replace(dev, norm_row_us=0.0)
    assert predict(both, dev).latency_us > predict(both, flat).latency_us
    assert predict(one, dev).latency_us == pytest.approx(predict(one, flat).latency_us)


def test_an_inline_norm_computed_on_chip_is_not_charged_as_a_norm_task(qwen3):
    """The expert inlines every norm its matmuls read: onchip_norm_us prices those, not norm_task_us."""
    _, expert = qwen3
    plan = expert.plan()
    _, own, fused, _ = light_tasks(plan)
    onchip = _onchip_array(plan)
    assert (onchip[fused > 0] >= 1).all() and fused.sum() > 0
    us = light_task_us(plan, DEVICES["H200"])
    ks = kinds(plan)
    matmuls = [i for i, k in enumerate(ks) if k == "matmul"]
    assert matmuls and not us[matmuls].any()


def test_cold_code_chars_weigh_each_first_call_by_its_source(qwen3):
    base, expert = qwen3
    for ir in (base, expert):
        plan = ir.plan()
        calls, sizes = function_table(plan)
        assert calls == function_calls(plan)
        assert set(sizes) == {f for ids in calls.values() for f in ids}
        count, chars = cold_code(plan), cold_code_chars(plan)
        assert (chars[count == 0] == 0).all() and (chars[count > 0] > 0).all()
        assert min(sizes.values()) * count.sum() <= chars.sum() <= max(sizes.values()) * count.sum()
        dev = DEVICES["H200"]      # predict's one walk prices both
        assert np.allclose(first_call_us(plan, dev), dev.cold_code_us * count + dev.cold_code_kchar_us / 1e3 * chars)
    # a projection's code is several times a residual add's
    plan = base.plan()
    calls, sizes = function_table(plan)
    assert sizes[calls[f"{L0}self_attn.q_proj"][-1]] > 2 * sizes[calls[f"{L0}add"][-1]]


def test_predict_prices_the_light_ops_and_the_code_by_its_size(qwen3):
    base, expert = qwen3
    dev = DEVICES["H200"]
    bare = replace(dev, small_task_us=0.0, norm_task_us=0.0, fused_norm_us=0.0, cold_code_us=0.0, cold_code_kchar_us=0.0)
    for ir in (base, expert):
        plan = ir.plan()
        # each term only adds time, and the default's chain of small ops and norm tasks is on its path
        light = replace(bare, small_task_us=dev.small_task_us, norm_task_us=dev.norm_task_us)
        code = replace(bare, cold_code_kchar_us=dev.cold_code_kchar_us)
        b = predict(plan, bare).latency_us
        assert predict(plan, light).latency_us > b
        assert predict(plan, code).latency_us > b
    d, e = (predict(ir.plan(), dev).latency_us - predict(ir.plan(), bare).latency_us for ir in (base, expert))
    assert d > e      # the default runs more small-op and norm tasks than the expert, which fuses them
    assert {"light_tasks", "light_task_us", "cold_code_chars", "SMALL_KINDS"} <= set(costmodel.__all__)
