"""A decode attention task copying its first cached key and value rows to shared memory before it
waits for its inputs (emit_cuda(kv_pre=ROWS), codegen ROWS): the same bits as reading them after
the wait, for fused and unfused cache writes, split and unsplit, short chunks and long ones."""
from __future__ import annotations

import pytest
from conftest import assert_1b_expert_same_bits, assert_same_bits, expert_1b, seeded_step
from test_cache_write_fusion import TINY, _plans

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import emit_cuda
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

ROWS = 64


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("split", [1, 3])
def test_the_preload_is_emitted_only_when_asked_and_compiles_for_hopper(graphs, name, split):
    for plan in _plans(graphs[name], split):
        plain, _ = emit_cuda(plan)
        pre, _ = emit_cuda(plan, kv_pre=ROWS)
        assert "cp.async.cg.shared.global" not in plain and "kbuf" not in plain
        assert pre.count("cp.async.cg.shared.global") >= 2    # a key copy and a value copy per attention body
        assert "cp.async.wait_all" in pre
        assert compile_cuda(pre, f"{name}_kvpre_{split}.cu", arch="sm_90")


def test_the_preload_compiles_without_the_weight_ring(graphs):
    _, fused = _plans(graphs["llama-tiny"], 2)
    src, table = emit_cuda(fused, kv_pre=ROWS, weights="regs")
    assert table.ws_stages == 0 and "cp.async.cg.shared.global" in src
    assert compile_cuda(src, "kvpre_regs.cu", arch="sm_90")


def test_a_fused_cache_write_puts_the_new_row_where_the_attention_reads_it(graphs):
    _, fused = _plans(graphs["llama-tiny"], 2)
    src, _ = emit_cuda(fused, kv_pre=ROWS)
    plain_plan, _ = _plans(graphs["llama-tiny"], 2)
    unfused, _ = emit_cuda(plain_plan, kv_pre=ROWS)
    # the attention that stores the new rows writes them into kbuf / vbuf too, and reads row pos from
    # there; one that waits for a cache-write task reads row pos from the cache
    assert "((float*)(kbuf))[" in src and "((float*)(vbuf))[" in src
    assert "(kbuf))[" not in unfused and f"pre_first && s < {ROWS} && s0 + s != newrow" in unfused


def test_the_1b_expert_keeps_its_five_ring_stages_with_the_preload():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    plan = apply_edits(base, expert_edits(base)).plan()
    _, plain = emit_cuda(plan)
    _, pre = emit_cuda(plan, kv_pre=ROWS)
    assert plain.ws_stages == pre.ws_stages == 5
    assert pre.smem_bytes - plain.smem_bytes <= 2 * ROWS * 128 + 16


# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_the_preload_gives_the_same_bits_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, _ = seeded_step(name, seed)
        for split in (1, 3):
            for plan in _plans(g, split):
                assert_same_bits(plan, params, feeds, 2, kv_pre=ROWS)
                assert_same_bits(plan, params, feeds, 1, kv_pre=ROWS, hops="counters")


@pytest.mark.gpu
def test_the_1b_expert_with_the_preload_gives_the_experts_bits_on_gpu():
    assert_1b_expert_same_bits(2, kv_pre=ROWS)
    # unsplit: a chunk longer than ROWS reads its later rows (and row pos) after the wait
    plan, params, feeds = expert_1b(2, levers=("inline", "wave", "cache"))
    assert int(list(feeds.values())[-1].max()) + 1 > ROWS
    assert_same_bits(plan, params, feeds, 2, kv_pre=ROWS)
