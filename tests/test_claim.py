"""Claimed ops (emit_cuda(claim=PATTERN)): the SMs that run an op's tasks take its tiles from a pool
as their weight ring's producer warp reaches them, so an SM that streams faster computes more tiles.
Any task may compute any tile, so the outputs are the static plan's bit for bit, run after run."""
from __future__ import annotations

import re

import pytest
from conftest import assert_1b_expert_same_bits, assert_same_bits, expert_1b, expert_plan, seeded_step

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import MK_CLAIMED, CodegenError, emit_cuda
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

MLP = r"mlp\.(silu_mul|add)$"
# finer tiles than the expert's, so that the tiny model has more tiles than SMs to claim
FINE = "tile layers.*.mlp.silu_mul n=16\ntile layers.*.mlp.add n=16"


def test_claimed_calls_are_marked_and_their_rows_name_the_pool(graphs):
    plan = expert_plan(graphs["llama-tiny"], extra=FINE)
    plain, _ = emit_cuda(plan)
    src, tab = emit_cuda(plan, claim=MLP)
    assert "#define WS_CLAIMS" not in plain and "#define WS_CLAIMS 4" in src    # 2 layers x (silu_mul, add)
    claimed = {t for name, ids in plan.tg.by_op.items() if re.search(MLP, name) for t in ids}
    assert len(claimed) > 2 * 8            # more tiles than SMs: there is something to balance
    # every claimed task's call carries MK_CLAIMED in its part word, and no other call does
    marks = {}
    for qi, q in enumerate(plan.queues):
        p = tab.qs_start[qi]
        for t in q:
            nw, nc, ns, npf = tab.q_stream[p + 1:p + 5]
            calls = tab.q_stream[p + 5 + 2 * nw:p + 5 + 2 * nw + 5 * nc]
            marks[t] = [calls[5 * c + 3] for c in range(nc)]
            p += 5 + 2 * nw + 5 * nc + ns + 4 * npf
    assert all(marks[t] == [MK_CLAIMED] for t in claimed)
    assert all(MK_CLAIMED not in m for t, m in marks.items() if t not in claimed)
    # a claimed call's segments: the pool in bits 16-23 of the rows word, the group's size on its first
    pools = [(w >> 16) & 0xFF for w in tab.ws_rows if w >> 16]
    assert pools and set(pools) == {1, 2, 3, 4}
    # a group: silu_mul's gate and up rows (2 segments), add's down rows (1)
    assert {w >> 24 for w in tab.ws_rows if w >> 16} == {0, 1, 2}
    assert compile_cuda(src, "claim.cu", arch="sm_90")
    # claim_split: a pool of smaller tiles than the plan's, each task's call naming one pool tile's rows
    half, tab2 = emit_cuda(plan, claim=MLP, claim_split=2)
    n_silu = len(plan.tg.by_op["layers.0.mlp.silu_mul"])
    assert f"ws_pool_tiles[] = {{{2 * len(plan.tg.by_op['layers.0.mlp.add'])}, {2 * n_silu}," in half
    assert {w & 0xFFFF for w in tab2.ws_rows if w >> 16} == {8}      # 16-row tiles in halves
    assert compile_cuda(half, "claim_half.cu", arch="sm_90")


def test_claim_refuses_what_it_cannot_serve(graphs):
    g = graphs["llama-tiny"]
    plan = expert_plan(g, extra=FINE)
    for knobs, msg in [({"hops": "counters"}, "needs hops='ll'"),
                       ({"producer": "thread", "hops": "ll"}, "producer warp"),
                       ({"l2_ahead": 2}, "no L2 lookahead")]:
        with pytest.raises(CodegenError, match=re.escape(msg)):
            emit_cuda(plan, claim=MLP, **knobs)
    with pytest.raises(CodegenError, match="not a regular expression"):
        emit_cuda(plan, claim="mlp.(")
    with pytest.raises(CodegenError, match="do not split into 3 tiles of whole rows"):
        emit_cuda(plan, claim=MLP, claim_split=3)
    with pytest.raises(CodegenError, match="1 to 64 pool tiles"):
        emit_cuda(plan, claim=MLP, claim_split=0)
    # an attention task reads no weights through the ring: it names the op and why
    with pytest.raises(CodegenError, match=r"layers\.0\.attn\.decode_attention cannot take its tiles"):
        emit_cuda(plan, claim=r"decode_attention")
    # a pattern no op matches claims nothing: the plain kernel
    assert emit_cuda(plan, claim="no such op")[0] == emit_cuda(plan)[0]


def test_an_op_whose_output_nothing_in_the_kernel_reads_may_be_claimed(graphs):
    """lm_head: its output is the graph's, plain words read after the launch, so no reader polls it,
    and its input is a norm folded into it, whose output is never written (the tile polls the norm's
    input, LL words). Both were refused before, though neither leaves a reader unserved."""
    plan = expert_plan(graphs["llama-tiny"])
    src, tab = emit_cuda(plan, claim="^lm_head$", claim_split=2)
    assert "#define WS_CLAIMS 1" in src
    assert f"ws_pool_tiles[] = {{{2 * len(plan.tg.by_op['lm_head'])}}}" in src
    assert compile_cuda(src, "claim_lm_head.cu", arch="sm_90")


def test_the_1b_expert_with_claimed_mlp_ops_keeps_its_ring():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    plan = apply_edits(base, expert_edits(base) + "\ntile layers.*.mlp.silu_mul n=32\ntile layers.*.mlp.add n=8").plan()
    _, tab = emit_cuda(plan, claim=MLP)
    assert tab.ws_stages == 5 and len(tab.scratch) >= 32      # a claim count per pool


# on the GPU


@pytest.mark.gpu
def test_claimed_tiles_give_the_static_plans_bits_on_gpu():
    for seed in (0, 1, 2):
        g, params, feeds, _ = seeded_step("llama-tiny", seed)
        for extra in ("", FINE):
            plan = expert_plan(g, extra=extra)
            for split in (1, 2):    # 4 runs: the pools' counts carry across runs
                assert_same_bits(plan, params, feeds, 4, claim=MLP, claim_split=split)


@pytest.mark.gpu
def test_the_1b_expert_with_claimed_tiles_gives_the_same_bits_on_gpu():
    plan, params, feeds = expert_1b(2, extra="tile layers.*.mlp.silu_mul n=32\ntile layers.*.mlp.add n=8")
    assert_same_bits(plan, params, feeds, claim=MLP)
    assert_1b_expert_same_bits(2, claim=MLP, claim_split=4)     # the expert's own tiles in quarters
