"""Where the megakernel's bytes sit in L2, the knobs of 2026-11-27: the weight ring's bulk copies
marked first to be evicted (emit_cuda ring_l2, "evict_first" by default: a weight is read once a
step, so the KV slices, LL words and counters outlast it), a split attention part's KV prefetch
also issued one task earlier (kv_prefetch="ahead") and its value rows sent to L1 with its keys
(v_prefetch="l1"). On the CPU: what each puts in the source, that it compiles, and the refusals.
On the GPU: the same bits as without them (they move when bytes arrive, not which)."""
import re

import pytest
from conftest import assert_1b_expert_same_bits, assert_builds_agree, expert_plan, seeded_step

from megakernel_gym.compiler.codegen import RING_L2, RING_L2_DEFAULT, CodegenError, emit_cuda
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

HINT = "complete_tx::bytes.L2::cache_hint"


def test_the_weight_ring_marks_its_copies_evict_first_by_default(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    src, table = emit_cuda(plan)
    plain, plain_table = emit_cuda(plan, ring_l2="normal")
    assert RING_L2_DEFAULT == "evict_first" and set(RING_L2) == {"normal", "evict_first"}
    assert table.ws_stages >= 2                                   # a ring, so the copies are there
    assert "#define WS_EVICT_FIRST 1" in src and "#define WS_EVICT_FIRST 0" in plain
    assert "createpolicy.fractional.L2::evict_first.b64" in src
    # both copy forms (one per packed stage, one per row segment) go through the one bulk copy that
    # carries the policy (the text is there either way, taken or not by the macro)
    assert src.count(HINT) == plain.count(HINT) == 1
    copies = src.split("void ws_copy(")[1].split("\n}\n")[0]
    assert copies.count("WS_BULK(") == 2 and "cp.async.bulk.shared" not in copies
    assert table.q_stream == plain_table.q_stream and table.smem_bytes == plain_table.smem_bytes
    assert compile_cuda(src, "ring_evict_first.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match=re.escape("ring_l2 'evict_last' is not one of normal, evict_first")):
        emit_cuda(plan, ring_l2="evict_last")


def test_kv_prefetch_ahead_also_sends_the_next_tasks_slice_and_compiles(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(ir, expert_edits(ir) + "\nsplit layers.*.attn.decode_attention n=3").plan()
    ahead, _ = emit_cuda(plan, kv_prefetch="ahead")
    wait, _ = emit_cuda(plan, kv_prefetch="wait")
    loop = ahead.split('extern "C" __global__')[1]
    assert "void pre_" in ahead and "const int* C2 = QS + p + 5 + 2 * QS[p + 1];" in loop
    # the next task's pre-wait work, then this task's waits; "wait" has only its own
    assert loop.index("C2 = QS + p") < loop.index("ld_acquire(&counters[W[2 * w]])")
    assert "C2 = QS + p" not in wait
    assert compile_cuda(ahead, "kv_ahead.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="is not one of wait, body, ahead"):
        emit_cuda(plan, kv_prefetch="later")


def test_v_prefetch_l1_sends_each_value_row_to_l1_with_its_key(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(ir, expert_edits(ir) + "\nsplit layers.*.attn.decode_attention n=2").plan()
    src, _ = emit_cuda(plan, v_prefetch="l1")
    assert "prefetch.global.L1" not in emit_cuda(plan)[0]
    body = src.split("prefetch.global.L1")[1]
    assert "kr[j] = K4[" in body.split("\n}\n")[0]               # before the keys' loads of the same loop
    assert compile_cuda(src, "v_l1.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="v_prefetch 'l2' is not one of none, l1"):
        emit_cuda(plan, v_prefetch="l2")


# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama-tiny", "attention-tiny"])
def test_where_bytes_sit_in_l2_does_not_change_the_bits_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        ir = make_ir(g, num_sms=8)
        plan = apply_edits(ir, expert_edits(ir) + "\nsplit *decode_attention n=3").plan()
        for knobs in ({"ring_l2": "normal"}, {"kv_prefetch": "ahead"}, {"v_prefetch": "l1"}):
            assert_builds_agree(plan, params, feeds, ref, knobs, {}, what=f"{name} seed {seed} {knobs}")


@pytest.mark.gpu
def test_the_1b_expert_with_and_without_evict_first_gives_the_same_bits_on_gpu():
    for seed in (0, 1, 2):
        assert_1b_expert_same_bits(seed, ring_l2="normal")
