"""The weight ring's producer-warp knobs of emit_cuda. `l2_idle`: per op-name pattern, the stages past
the ring that the producer sends to L2 while the ring sits full and landed (the task is waiting for
its inputs). `inflight`: the most ring stages issued and not yet landed; `inflight_ahead`: the most
while the stages' task has not yet passed its waits. On the CPU: only the
matching ring calls' rows words carry the count, the sources compile, bad values are refused with
the knob's name. On the GPU: the same bits as without them (they move when bytes come, not which)."""
import re

import pytest
from conftest import assert_1b_expert_same_bits, assert_builds_agree, expert_plan, seeded_step

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import CodegenError, emit_cuda, parse_l2_idle
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.cuda.nvrtc import compile_cuda


def test_l2_idle_marks_only_the_matching_ring_calls_and_compiles(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    plain_src, plain = emit_cuda(plan)
    src, table = emit_cuda(plan, l2_idle=r"mlp\.silu_mul$:2")
    assert "#define WS_L2_IDLE 0" in plain_src and "#define WS_L2_IDLE 1" in src
    assert all(r >> 24 == 0 for r in plain.ws_rows)
    marked = [r >> 24 for r in table.ws_rows if r >> 24]
    assert marked and set(marked) == {2}
    # the rows themselves are unchanged, and only silu_mul's calls (gate and up, fused into it) are marked
    assert [r & 0xffffff for r in table.ws_rows] == plain.ws_rows
    silu = sum(1 for name in plan.tg.by_op if name.endswith("mlp.silu_mul") for _ in plan.tg.by_op[name])
    assert len(marked) == 2 * silu
    assert compile_cuda(src, "l2_idle.cu", arch="sm_90")


def test_l2_idle_refuses_bad_specs_naming_the_knob(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    assert parse_l2_idle(r"a:1;b\.c$:64") == (("a", 1), (r"b\.c$", 64))
    assert parse_l2_idle(None) == ()
    for bad, msg in [("mlp.add", "l2_idle item"), ("(:1", "not a regular"), ({"a": 0}, "1 to 64"),
                     ({"a": 65}, "1 to 64")]:
        with pytest.raises(CodegenError, match=re.escape(msg)):
            emit_cuda(plan, l2_idle=bad)
    with pytest.raises(CodegenError, match="producer='warp'"):
        emit_cuda(plan, l2_idle="a:1", producer="thread")
    with pytest.raises(CodegenError, match="no claim"):
        emit_cuda(plan, l2_idle="a:1", claim=r"mlp\.add$")


def test_inflight_caps_the_producers_copies_in_flight_and_compiles(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    src, table = emit_cuda(plan, inflight=2)
    assert "#define WS_INFLIGHT 2" in src and "if (g >= WS_INFLIGHT) ws_wait_bar" in src
    assert compile_cuda(src, "inflight.cu", arch="sm_90")
    big, _ = emit_cuda(plan, inflight=16)   # more than the ring has: the ring's own count, no cap
    assert f"#define WS_INFLIGHT {table.ws_stages}" in big
    for bad in (0, 17, "2"):
        with pytest.raises(CodegenError, match="inflight"):
            emit_cuda(plan, inflight=bad)
    with pytest.raises(CodegenError, match="producer='warp'"):
        emit_cuda(plan, inflight=2, producer="thread")


def test_inflight_ops_gives_matching_calls_their_own_cap_and_compiles(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    plain_src, plain = emit_cuda(plan)
    src, table = emit_cuda(plan, inflight_ops=r"mlp\.silu_mul$:3;attn:1", l2_idle=r"mlp\.silu_mul$:2")
    assert "#define WS_INFLIGHT_OPS 0" in plain_src and "#define WS_INFLIGHT_OPS 1" in src
    caps = [(r >> 16) & 0xff for r in table.ws_rows]
    assert set(caps) == {0, 1, 3} and all(r >> 24 in (0, 2) for r in table.ws_rows)
    # the rows under the two bytes are the plain ones; each call's cap is its op's
    assert [r & 0xffff for r in table.ws_rows] == plain.ws_rows
    assert sum(c == 3 for c in caps) == sum(r >> 24 == 2 for r in table.ws_rows)   # gate/up's calls, both knobs
    assert compile_cuda(src, "inflight_ops.cu", arch="sm_90")
    for bad, msg in [({"a": 0}, "1 to 16"), ({"a": 17}, "1 to 16"), ("x", "inflight_ops item")]:
        with pytest.raises(CodegenError, match=re.escape(msg)):
            emit_cuda(plan, inflight_ops=bad)
    with pytest.raises(CodegenError, match="no claim"):
        emit_cuda(plan, inflight_ops="a:1", claim=r"mlp\.add$")


def test_inflight_ops_refuses_a_ring_call_too_long_for_the_rows_word():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    plan = apply_edits(make_ir(g, num_sms=132), "tile lm_head n=128256").plan()   # one task of every vocab row
    with pytest.raises(CodegenError, match="at most 65,535"):
        emit_cuda(plan, inflight_ops=r"mlp:3")
    _, table = emit_cuda(plan)   # without per-op caps the word has room
    assert max(r & 0xffffff for r in table.ws_rows) == 128256


def _task_words(table) -> list[tuple[int, int]]:
    """Each queue's tasks, in order, as (queue, the calls word) from the kernel's task stream."""
    out = []
    for q in range(len(table.qs_start) - 1):
        p = table.qs_start[q]
        while p < table.qs_start[q + 1]:
            _, nw, nc, ns, npf = table.q_stream[p:p + 5]
            out.append((q, nc))
            p += 5 + 2 * nw + 5 * (nc & 0xffff) + ns + 4 * npf
    return out


def test_inflight_ahead_tells_the_producer_each_tasks_ring_segments_and_compiles(graphs):
    """With inflight_ahead each task with ring stages also carries where they end in its queue's stream
    (the calls word's high half: rising, the last at the queue's segments); the calls (low half) and the
    ring are the plain build's. Without it the source and the stream are as before (WS_AHEAD_CAP 0, no
    high half)."""
    plan = expert_plan(graphs["llama-tiny"])
    plain_src, plain = emit_cuda(plan)
    src, table = emit_cuda(plan, inflight_ahead=1)
    assert "#define WS_AHEAD 0" in plain_src and "#define MK_CALLS_MASK (~0)" in plain_src
    assert "#define WS_AHEAD 1" in src and "#define WS_AHEAD_CAP 1" in src and "#define MK_CALLS_MASK 0xffff" in src
    assert all(nc >> 16 == 0 for _, nc in _task_words(plain))
    words = _task_words(table)
    assert [(q, nc & 0xffff) for q, nc in words] == _task_words(plain)
    assert table.ws_rows == plain.ws_rows and table.ws_start == plain.ws_start
    for q in range(len(plan.queues)):   # each task with ring stages: where they end in its queue's stream
        ends = [nc >> 16 for qq, nc in words if qq == q and nc >> 16]
        assert ends == sorted(set(ends)) and (not ends or ends[-1] == table.ws_start[q + 1] - table.ws_start[q]), q
    assert any(nc >> 16 for _, nc in words) and any(nc >> 16 == 0 for _, nc in words)   # matmuls and the rest
    assert "ws_opens = opens" in src and "ahead = own_ahead ? own_ahead : WS_AHEAD_CAP;" in src
    assert "MK_PROBE(PROBE_INPUT);\n  MK_OPEN();" in src   # a matmul opens its stages once its input is staged
    assert compile_cuda(src, "inflight_ahead.cu", arch="sm_90")
    # with the schedule's own caps (inflight edits) too: both in the one cap
    both, _ = emit_cuda(plan, inflight_ahead=2, inflight_ops=r"attn:1")
    assert "#define WS_AHEAD_CAP 2" in both and "#define WS_INFLIGHT_OPS 1" in both
    assert compile_cuda(both, "inflight_ahead_ops.cu", arch="sm_90")


def test_inflight_ahead_refuses_bad_values_and_other_producers(graphs):
    plan = expert_plan(graphs["llama-tiny"])
    for bad in (-1, 17, True, "1", 1.0):
        with pytest.raises(CodegenError, match="inflight_ahead"):
            emit_cuda(plan, inflight_ahead=bad)
    with pytest.raises(CodegenError, match="producer='warp'"):
        emit_cuda(plan, inflight_ahead=1, producer="thread")
    with pytest.raises(CodegenError, match="no claim"):
        emit_cuda(plan, inflight_ahead=1, claim=r"mlp\.add$")


# on the GPU: each knob moves when bytes come, not which, so every build computes the same bits
RING_KNOBS = [({"l2_idle": r"mlp\.silu_mul$:2;attn\.add$:1"}, {}), ({"inflight": 1}, {"inflight": 16}),
              ({"inflight": 2}, {"inflight": 16}), ({"inflight": 3}, {"inflight": 16}),
              ({"inflight_ops": r"mlp:3;attn:1"}, {}), ({"inflight_ahead": 1}, {}), ({"inflight_ahead": 2}, {}),
              ({"inflight_ahead": 1, "inflight_ops": r"mlp:3"}, {}), ({"distinct_ops": "."}, {})]


def test_distinct_ops_gives_matching_ops_functions_of_their_own_and_compiles(graphs):
    """distinct_ops (a probe of the kernel's instruction footprint): the ops it names get a function of
    their own instead of one they share with other layers' same bodies; the task table (calls by
    function id aside) and the ring are the plain build's. A pattern that is no regular expression is refused."""
    plan = expert_plan(graphs["llama-tiny"])
    plain_src, plain = emit_cuda(plan)
    src, table = emit_cuda(plan, distinct_ops=r"layers\.1\.")
    funcs = lambda s: s.count("__device__ __forceinline__ void op_")   # noqa: E731
    assert funcs(src) > funcs(plain_src)
    assert "// used by 1 op(s): layers.1." in src and "// used by 1 op(s): layers.1." not in plain_src
    assert table.ws_rows == plain.ws_rows and table.qs_start == plain.qs_start and table.slot_args != []
    assert len(table.q_stream) == len(plain.q_stream)
    assert funcs(emit_cuda(plan, distinct_ops="")[0]) == funcs(plain_src)
    with pytest.raises(CodegenError, match="distinct_ops .* is not a regular expression"):
        emit_cuda(plan, distinct_ops="layers.(")
    assert compile_cuda(src, "distinct_ops.cu", arch="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("knobs,want", RING_KNOBS, ids=[str(k) for k, _ in RING_KNOBS])
def test_ring_knobs_give_the_same_bits_on_gpu(knobs, want):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step("llama-tiny", seed)
        assert_builds_agree(expert_plan(g), params, feeds, ref, knobs, want, what=f"seed {seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{"l2_idle": r"mlp\.silu_mul$:4"}, {"inflight_ahead": 1}], ids=str)
def test_the_1b_expert_with_ring_knobs_gives_the_experts_bits_on_gpu(knobs):
    for seed in (0, 1, 2):
        assert_1b_expert_same_bits(seed, **knobs)
