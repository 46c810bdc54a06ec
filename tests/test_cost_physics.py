"""The sim's reward obeys physics (issue 39, item 1): a policy trained on the sim optimizes the cost
model, so where the model is wrong it learns the error. Every SM streaming at one moment shares one
HBM; a task pays for everything its fused producers read; no plan moves fewer bytes than its work
needs. Checked over random plans and the plans a hill-climb against the old model found."""
import random

import numpy as np
import pytest

from megakernel_gym.compiler import ZOO, capture, predict
from megakernel_gym.compiler.costmodel import (DEVICES, _task_cost_arrays, required_bytes, ring_share, stream_rate,
                                                streaming_concurrency, task_costs)
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
    rate = ring_share(plan) * stream_rate(np.asarray(p.spread), dev.sm_gbs, dev.hbm_gbs)
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
    attention reads its heads' KV caches (the fused plan moved 40 MB less than the expert's)."""
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
    cache_bytes = 2 * int(np.prod(cache.shape)) * 2          # k and v, bf16
    o_tasks = [i for i, t in enumerate(plan.tg.tasks)       # o_proj's tasks (the expert fuses o_proj into the add)
               if any(p == "layers.0.attn.decode_attention" for p, _ in t.prologue)]
    assert len(o_tasks) > 1 and all(nbytes[t] >= cache_bytes for t in o_tasks)
    assert sum(nbytes) > sum(task_costs(expert.plan())[0]) + (len(o_tasks) - 1) * cache_bytes
