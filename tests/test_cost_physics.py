"""The sim's reward obeys physics (issue 39, item 1): a policy trained on the sim optimizes the cost
model, so where the model is wrong it learns the error. Every SM streaming at one moment shares one
HBM; a task pays for everything its fused producers read; no plan moves fewer bytes than its work
needs. Checked over random plans and the plans a hill-climb against the old model found."""
import dataclasses
import random

import numpy as np
import pytest

from conftest import waits_and_times
from megakernel_gym.compiler import ZOO, capture, predict
from megakernel_gym.compiler.costmodel import (DEVICES, _task_cost_arrays, required_bytes, ring_fed_bytes,
                                                ring_fill_array, ring_share, stream_rate, streaming_concurrency,
                                                task_costs)
from megakernel_gym.ir_exposure import make_ir
from megakernel_gym.ir_exposure.edits import EditError, apply_edits, random_edit
from megakernel_gym.ir_exposure.ir import IRError

HALVES = ("unfuse layers.*.mlp.gate_proj\nunfuse layers.*.mlp.up_proj\n"
          "assign layers.*.mlp.gate_proj sms=0-63\nassign layers.*.mlp.up_proj sms=64-127")


def peak_bandwidth(plan, device: str = "H200", points: int = 2000) -> float:
    """The most the prediction streams at once, as a share of the chip's HBM bandwidth: at the
    midpoint of (up to `points`) streaming tasks, the sum of the streaming rates of every task with
    bytes to move running then. With a bandwidth pool per op (the model before issue 39) the 1B
    default schedule reached 1.04x and gate/up on disjoint SM halves 1.09x; now both stay near 0.8."""
    p, dev = predict(plan, device), DEVICES[device]
    own = _task_cost_arrays(plan)[0]
    start, finish = np.asarray(p.start_us), np.asarray(p.finish_us)
    # each task at the rate the model streams it: its ring's (sm_gbs at the share of its stages its
    # rows fill), or its own loads' (plain_gbs) where no ring feeds it
    per_sm = np.where(ring_fed_bytes(plan, own) > 0, dev.sm_gbs * ring_fill_array(plan), dev.plain_gbs)
    rate = ring_share(plan) * stream_rate(np.asarray(p.spread), per_sm, dev.hbm_gbs)
    on = (own > 0) & (finish > start)
    mids = ((start + finish) / 2)[on]
    worst = 0.0
    for x in mids[:: max(1, len(mids) // points)]:
        worst = max(worst, float(rate[on & (start <= x) & (finish > x)].sum()))
    return worst / dev.hbm_gbs


def _random_plans(ir, count: int, edits: int, seed: int):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        x = ir
        for _ in range(edits):
            try:
                x = apply_edits(x, random_edit(x, rng))
            except (EditError, IRError):
                pass
        out.append(x)
    return out


@pytest.fixture(scope="module")
def tiny_ir():
    return make_ir(capture(*ZOO["llama-tiny"](), "llama-tiny"), num_sms=132)


@pytest.fixture(scope="module")
def onebee():
    from megakernel_gym.policies.expert import expert_edits
    ir0 = make_ir(capture(*ZOO["llama-1b"](device="meta"), "llama-1b"), num_sms=132)
    return ir0, apply_edits(ir0, expert_edits(ir0))


def test_streaming_concurrency_counts_who_streams_beside_a_task():
    start, finish = np.array([0.0, 0.0, 5.0, 0.0]), np.array([10.0, 5.0, 10.0, 10.0])
    streams = np.array([True, True, True, False])
    # task 0 has one other streamer beside it all the time; task 3 moves no bytes and counts as 1
    assert streaming_concurrency(start, finish, streams).tolist() == [2.0, 2.0, 2.0, 1.0]
    # two tasks that only touch end to start never overlap
    assert streaming_concurrency(np.array([0.0, 5.0]), np.array([5.0, 9.0]), np.array([True, True])).tolist() == [1, 1]


def test_random_tiny_plans_never_stream_past_hbm_nor_move_less_than_their_work(tiny_ir):
    need = required_bytes(tiny_ir.graph)
    for x in [tiny_ir] + _random_plans(tiny_ir, 12, 6, seed=0):
        plan = x.plan()
        assert sum(task_costs(plan)[0]) >= need, x.text
        assert peak_bandwidth(plan) <= 1.0, x.text


def test_disjoint_halves_share_one_hbm(onebee):
    """gate and up unfused onto disjoint 64-SM halves got 2 x 0.535 of HBM from per-op bandwidth pools:
    predicted 6% faster than the expert (H200), measured 2.6% slower on an H100."""
    ir0, expert = onebee
    halves = apply_edits(expert, HALVES)
    e, h = predict(expert.plan(), "H200"), predict(halves.plan(), "H200")
    assert h.latency_us > e.latency_us
    for x in (ir0, expert, halves):
        assert peak_bandwidth(x.plan()) <= 1.0
        assert sum(task_costs(x.plan())[0]) >= required_bytes(x.graph)
    # what the physics asks of the floor: the bytes this plan moves, at the chip's bandwidth
    assert h.floor_us >= required_bytes(halves.graph) / (DEVICES["H200"].hbm_gbs * 1e3)


def test_sms_share_hbm_by_the_copies_their_rings_keep_in_flight(onebee):
    """ring_share: gate_proj at `inflight` 1 on one half of the chip and up_proj at the compiler's 2 on
    the other: an H200 streamed gate's rows at 20.6 GB/s an SM and up's at 35.8 at the same moment
    (task_probe_llama_climb6_dump.json), where the model gave both the same rate. Weighted by their
    copies, each half-chip op takes its share, and the chip still never streams past HBM."""
    ir0, _ = onebee
    halves = apply_edits(ir0, HALVES.split("\n", 2)[2])      # the default has them unfused already
    capped = apply_edits(halves, "inflight layers.*.mlp.gate_proj n=1")

    def layer_streams(x):
        plan = x.plan()
        p = predict(plan, "H200")
        dur = np.asarray(p.finish_us) - np.asarray(p.start_us)
        ops = {o: [dur[t] for t in plan.tg.by_op[f"layers.5.mlp.{o}"]] for o in ("gate_proj", "up_proj")}
        return {o: float(np.median(v)) for o, v in ops.items()}, p.latency_us, plan

    even, t_even, _ = layer_streams(halves)
    got, t_capped, plan = layer_streams(capped)
    assert got["gate_proj"] / got["up_proj"] > 1.5 * even["gate_proj"] / even["up_proj"], (even, got)
    assert t_capped > t_even
    assert peak_bandwidth(plan) <= 1.0
    share = ring_share(plan)
    assert {share[t] for t in plan.tg.by_op["layers.5.mlp.gate_proj"]} == {0.5}
    assert {share[t] for t in plan.tg.by_op["layers.5.mlp.up_proj"]} == {1.0}


def test_an_attention_is_not_fused_into_its_consumer_but_its_producers_are(onebee):
    _, expert = onebee
    with pytest.raises(EditError, match="decode_attention is not fused into its consumer.*split it"):
        apply_edits(expert, "fuse layers.*.attn.decode_attention into layers.*.attn.o_proj")
    # the honest neighbours: the expert fuses q's rope and the cache writes into the attention
    assert any(v.endswith("decode_attention") for v in expert.fused.values())


def test_an_attention_fused_into_a_consumer_is_charged_its_caches_per_task(onebee):
    """Below the IR's refusal, the cost model still prices it: each o_proj task that runs the
    attention reads its heads' KV caches, the positions it attends (the fused plan moved 40 MB less
    than the expert's)."""
    from megakernel_gym.compiler.costmodel import attended_positions
    from megakernel_gym.compiler.schedule import build_plan
    _, expert = onebee
    knobs = expert.knobs.copy()
    knobs.fused = dict(expert.fused)
    for i in range(2):
        knobs.fused[f"layers.{i}.attn.decode_attention"] = f"layers.{i}.attn.o_proj"
    plan = build_plan(expert.graph, knobs)
    nbytes = task_costs(plan)[0]
    g = expert.graph
    cache = g.tensors["layers.0.attn.k_cache"]
    attended = attended_positions(g, g.op("layers.0.attn.decode_attention")) / cache.shape[2]
    assert 0.45 < attended < 0.55                             # about half the cache: pos is uniform in [0, s_max)
    cache_bytes = int(2 * int(np.prod(cache.shape)) * 2 * attended)      # k and v, bf16
    o_tasks = [i for i, t in enumerate(plan.tg.tasks)       # o_proj's tasks (the expert fuses o_proj into the add)
               if any(p == "layers.0.attn.decode_attention" for p, _ in t.prologue)]
    assert len(o_tasks) > 1 and all(nbytes[t] >= cache_bytes for t in o_tasks)
    assert sum(nbytes) > sum(task_costs(expert.plan())[0]) + (len(o_tasks) - 1) * cache_bytes


def test_an_attention_attends_pos_plus_one_positions_half_the_cache_on_average():
    """The kernel reads pos + 1 cached positions (a sliding window its last `window`); the judge draws
    pos uniformly from [0, s_max), so the sim prices the mean, about half the cache, not all of it."""
    from megakernel_gym.compiler.costmodel import attended_positions
    g = capture(*ZOO["llama-tiny"](device="meta"), "llama-tiny")
    op = next(o for o in g.ops if o.kind == "decode_attention")
    s_max = g.tensors[op.inputs[1]].shape[2]
    assert attended_positions(g, op) == pytest.approx((s_max + 1) / 2)
    assert attended_positions(g, op, [0]) == 1 and attended_positions(g, op, [s_max - 1]) == s_max
    assert attended_positions(g, op, [3, 5]) == 5                     # the mean over the batch's sequences
    assert attended_positions(g, op, [10 * s_max]) == s_max           # a position past the cache reads it all
    windowed = type(op)(op.name, op.kind, op.inputs, op.outputs, {**op.attrs, "window": 4})
    assert attended_positions(g, windowed, [s_max - 1]) == 4
    # the mean of min(pos + 1, 4) over pos uniform in [0, s_max)
    assert attended_positions(g, windowed) == pytest.approx(sum(min(p + 1, 4) for p in range(s_max)) / s_max)


def test_an_unsplit_attention_costs_its_positions_and_a_split_spreads_them(onebee):
    """An H200 ran the 1B default 875 us at pos 0 and 1,051 at 1,023 (attention_positions.json): the
    unsplit attention, one SM a KV head, is on the chain of every layer. The sim's step grows with the
    positions by the attention's rows and flops (compute_us), and far less where the expert splits it
    over 8 parts; at the judge's expectation it sits between the ends."""
    from megakernel_gym.compiler.costmodel import attention_work, costs_at
    default, expert = onebee
    d, e = default.plan(), expert.plan()
    lo, hi = (predict(d, "H200", positions=[0]).latency_us, predict(d, "H200", positions=[1023]).latency_us)
    assert 120 < hi - lo < 240                                 # measured 176 us
    assert lo < predict(d, "H200").latency_us < hi
    e_lo, e_hi = predict(e, "H200", positions=[0]).latency_us, predict(e, "H200", positions=[1023]).latency_us
    assert 0 < e_hi - e_lo < (hi - lo) / 4                      # measured 18 us
    # the attention's rows are the task's cache bytes: half the cache at the expectation, all of it at the end
    ab, af = attention_work(d)
    ab_end, _ = costs_at(d, [1023])[2]
    attn = [t.id for t in d.tg.tasks if t.op == "layers.0.attn.decode_attention"]
    row_bytes = 2 * 1024 * 64 * 2                             # k and v of one KV head, bf16
    assert ab_end[attn] == pytest.approx(row_bytes) and ab[attn] == pytest.approx(row_bytes * 1025 / 2048, rel=1e-3)
    assert np.all(af[attn] == 4 * 4 * 64 * 512.5)             # 4 q heads x d x 2 (q.k) x 2 (p.v) a position
    assert not np.any(ab[[t.id for t in d.tg.tasks if "mlp" in t.op]])   # no other op has attention work


def test_an_ahead_cap_of_one_preloads_at_half_the_share_and_costs(onebee):
    """ring_share(waiting=True): while its SM waits, a ring streams at the share its `ahead` cap keeps
    in flight (Little's law, as ring_share for a running task), so `ahead ... n=1` preloads less in the
    same wait and the step is slower; the sim had preloaded at the running cap's share, and an H200 ran
    GPT-2 large's climb 0 with only its ahead edits 2.1% slower where the sim moved by nothing
    (sim_bisect.json). A cap above the compiler's 2 takes no more (at most 1)."""
    ir0, _ = onebee
    capped = apply_edits(ir0, "ahead layers.*.mlp.gate_proj n=1")
    plan, base = capped.plan(), ir0.plan()
    gate = plan.tg.by_op["layers.5.mlp.gate_proj"]
    assert set(ring_share(plan, waiting=True)[gate]) == {0.5} and set(ring_share(plan)[gate]) == {1.0}
    assert set(ring_share(apply_edits(ir0, "ahead layers.*.mlp.gate_proj n=5").plan(), waiting=True)[gate]) == {1.0}
    p, q = predict(plan, "H200"), predict(base, "H200")
    base_gate = base.tg.by_op["layers.5.mlp.gate_proj"]
    assert np.median(np.asarray(p.preloaded)[gate]) < np.median(np.asarray(q.preloaded)[base_gate])
    assert p.latency_us > q.latency_us + 5


def test_a_ring_cap_takes_no_share_from_a_task_with_fewer_stages_than_the_compilers_cap(onebee):
    """ring_share: a task keeps no more copies in flight than it has ring stages, so a cap of 1 costs a
    one-stage task nothing (an H200 ran Qwen3's expert, whose o_proj tasks are one 32 KB stage each at
    a cap of 1, at the same time with the cap at 2: ab_knobs_attn_caps.json), and a two-stage task
    half its share, as before."""
    ir0, _ = onebee
    cap = "\ninflight layers.*.attn.o_proj n=1"
    one, two = (apply_edits(ir0, f"tile layers.*.attn.o_proj n={n}{cap}").plan() for n in (8, 16))
    assert set(ring_share(one)[one.tg.by_op["layers.5.attn.o_proj"]]) == {1.0}
    assert set(ring_share(two)[two.tg.by_op["layers.5.attn.o_proj"]]) == {0.5}
    uncapped = apply_edits(ir0, "tile layers.*.attn.o_proj n=8").plan()
    dev = dataclasses.replace(DEVICES["H200"], caps_path_us=0.0)   # the caps' code path (caps_path) apart
    assert predict(one, dev).latency_us == pytest.approx(predict(uncapped, dev).latency_us, rel=0.002)
    assert predict(two, dev).latency_us > predict(
        apply_edits(ir0, "tile layers.*.attn.o_proj n=16").plan(), dev).latency_us


def test_an_onchip_norms_weight_is_a_trip_that_a_waiting_sm_takes_in():
    """A matmul that computes an rmsnorm on chip loads the norm's weight before it stages its input
    (costmodel.onchip_norm_loads): a trip before its rows that a task waiting for its inputs takes into
    that wait, and one that starts as its SM's previous task ends pays in full (on an H200, Qwen3's
    expert with v_proj in finer tiles, a second q/k/v task on some SMs, ran 4.3% slower; unpriced the
    sim said 0.1% faster). Its reduction over the input (onchip_norm_us) waits for the input: no wait takes
    it in (on two H200s `inline` alone ran 0.7% faster on Qwen3 and 1.0% slower on llama-1b, where the
    sim, charging it nothing, said 3.8% and 1.7% faster)."""
    from unittest import mock

    from megakernel_gym.compiler import costmodel
    from megakernel_gym.compiler.costmodel import onchip_norm_loads
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(capture(*ZOO["qwen3-tiny"](), "qwen3-tiny"), num_sms=8)
    expert = apply_edits(base, expert_edits(base))
    assert not any(onchip_norm_loads(base.plan()))          # the default runs each norm as a task
    finer = apply_edits(expert, "tile model.layers.*.self_attn.v_proj n=4").plan()
    loads = np.asarray(onchip_norm_loads(finer))
    ops = {finer.tg.tasks[t].op.rsplit(".", 1)[-1] for t in np.flatnonzero(loads)}
    assert ops == {"q_proj", "k_proj", "v_proj", "mlp", "lm_head"} and loads.max() == 1   # gate/up stage x once
    from dataclasses import replace
    # (tiny's 8 SMs' hops are short; a fused norm's own time, norm_task_us, is what the mock would add)
    dev = replace(DEVICES["H200"], wait_latency_us=3.0, quiet_wait_us=3.0, norm_task_us=0.0)
    trip = dev.mem_latency_us
    with_it = predict(finer, dev)
    with mock.patch.object(costmodel, "_onchip_array", lambda plan: np.zeros(len(plan.tg.tasks))):
        without = predict(finer, dev)
    (w1, d1), (w0, d0) = waits_and_times(finer, with_it), waits_and_times(finer, without)
    hide = costmodel.polled_latency(dev)
    took_in = (loads > 0) & (w1 >= hide + trip) & (w0 >= hide)
    pays = (loads > 0) & (w1 == 0) & (w0 == 0)
    assert took_in.sum() >= 8 and pays.sum() >= 8
    assert dev.onchip_norm_us > 0
    assert np.allclose(d1[took_in] - d0[took_in], dev.onchip_norm_us * loads[took_in])
    assert np.allclose(d1[pays] - d0[pays], (trip + dev.onchip_norm_us) * loads[pays])
    assert with_it.latency_us > without.latency_us
    # a task that calls several matmuls each computing the norm on chip loads its weight in each call
    # (codegen's _stage_x); a real epilogue's matmuls stage it once for all (gate/up above: 1)
    qwen2 = make_ir(capture(*ZOO["qwen2-tiny"](), "qwen2-tiny"), num_sms=8)
    chain = apply_edits(apply_edits(qwen2, expert_edits(qwen2)), "\n".join(
        f"fuse model.layers.*.self_attn.{m}_proj into model.layers.*.self_attn.{c}"
        for m, c in (("q", "q_rope"), ("k", "k_rope"), ("v", "v_cache_write")))).plan()
    loads = onchip_norm_loads(chain)
    assert {loads[t.id] for t in chain.tg.tasks if t.op.endswith("decode_attention")} == {3}


def test_a_ring_preloading_while_its_sm_waits_shares_hbm_with_the_tasks_streaming_then(onebee):
    """Ring preloads are charged to the one HBM budget (issue 39, item 1): o_proj (fused into the residual
    add) in 32 tasks of 64 rows leaves 100 SMs free to preload gate/up while it streams. With those preloads
    free the sim read it 1.0% slower than the expert and o_proj in 64 tasks 1.2% faster; an H200 ran them
    5.5% slower and 0.1% slower (ab_knobs_s49_probe.json). llama-1b's adversary climbs from the expert took
    the 64 tasks for a gain (sim_bisect.json, run 9)."""
    _, expert = onebee
    e = predict(expert.plan(), "H200").latency_us
    t64, t32 = (predict(apply_edits(expert, f"tile layers.*.attn.add n={n}").plan(), "H200").latency_us / e
                for n in (32, 64))
    assert t64 > 0.995
    assert t32 > 1.03


def test_an_l2_prefetch_past_what_l2_holds_is_read_again_and_streams_beside_the_chain(onebee):
    """prefetch_terms: lm_head's 525 MB sent to L2 a task ahead (depth 2) or as each task is dequeued
    (depth 1) cannot wait in a 50 MB L2. An H200 ran the expert 5.8% and 4.9% slower, the default 4.5%,
    and gate/up at depth 2 (sent while o_proj streams) 11.7% (ab_knobs_s49_prefetch.json,
    ab_knobs_s49_probe.json), where the sim, pricing a prefetch as its issue latency alone, read 0.1-2.2%.
    Prefetches whose bytes fit (layer 3's gate at depth 1 and layer 5's v_proj at 2) ran within 0.1%."""
    ir0, expert = onebee

    def over(ir, edits, dev="H200"):
        return predict(apply_edits(ir, edits).plan(), dev).latency_us / predict(ir.plan(), dev).latency_us

    for edits in ("prefetch lm_head depth=2", "prefetch lm_head depth=1"):
        assert 1.03 < over(expert, edits) < 1.09, edits
    assert 1.03 < over(ir0, "prefetch lm_head depth=2") < 1.07
    assert over(expert, "prefetch layers.*.mlp.gate_proj depth=2\nprefetch layers.*.mlp.up_proj depth=2") > 1.06
    assert over(ir0, "prefetch layers.3.mlp.gate_proj depth=1\nprefetch layers.5.attn.v_proj depth=2") < 1.005
    # with neither term a prefetch is its issue latency, as before
    bare = dataclasses.replace(DEVICES["H200"], prefetch_reread=0.0, prefetch_stream=0.0)
    assert over(expert, "prefetch lm_head depth=2", bare) < 1.005
