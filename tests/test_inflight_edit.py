"""The `inflight OP n=N` edit (the IR's per-matmul cap on the weight ring's copies in flight), the
`ahead OP n=N` edit (the same cap while the matmul's task still waits for its inputs) and
x_bf16 (a decode matmul's bf16 input kept as bf16 in shared memory), both new with the expert of
2026-11-27. On the CPU: the edit's text and JSON forms, its refusals, the IR text round trip, the
codegen's rows words, the expert's lever, x_bf16's shared memory. On the GPU: the same bits as
without them (a cap moves when bytes come, not which; bf16 to float is exact)."""
import re

import pytest
import torch
from conftest import built_runs, expert_1b, seeded_step

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import emit_cuda
from megakernel_gym.ir_exposure import EditError, apply_edits, make_ir
from megakernel_gym.ir_exposure import parse as parse_ir
from megakernel_gym.ir_exposure.edits import apply_json, parse_edits
from megakernel_gym.policies.expert import INFLIGHT_HIDDEN, attention_matmuls, expert_edits, lever_edits
from megakernel_gym.cuda.nvrtc import compile_cuda


@pytest.fixture(scope="module")
def ir_1b():
    return make_ir(capture(*ZOO["llama-1b"](device="meta"), "llama-1b"), num_sms=132)


def test_inflight_parses_in_text_and_json_and_spells_back(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    (e,) = parse_edits("inflight layers.*.attn.o_proj n=1")
    assert (e.verb, e.op, e.n) == ("inflight", "layers.*.attn.o_proj", 1)
    assert e.to_text() == "inflight layers.*.attn.o_proj n=1" and e.to_json()["n"] == 1
    by_text = apply_edits(ir, "inflight layers.*.attn.o_proj n=1")
    by_json = apply_json(ir, [{"verb": "inflight", "op": "layers.*.attn.o_proj", "n": 1}])
    o_projs = [n for n in ir.ops if n.endswith("attn.o_proj")]
    assert by_text.knobs.inflight == by_json.knobs.inflight == {n: 1 for n in o_projs}
    # n=0 takes the compiler's cap back, and the IR is the one it was
    back = apply_edits(by_text, "inflight layers.*.attn.o_proj n=0")
    assert back.knobs.inflight == {} and back.text == ir.text


def test_inflight_refuses_what_it_cannot_cap_naming_the_fix(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    for text, msg in [("inflight layers.0.attn.o_proj n=17", "allowed: 1-16"),
                      ("inflight layers.0.attn.decode_attention n=1", "name the matmul"),
                      ("inflight layers.0.attn.o_proj", "inflight OP n=N"),
                      ("inflight nothing.here n=1", "no op named")]:
        with pytest.raises(EditError, match=re.escape(msg)):
            apply_edits(ir, text)
    with pytest.raises(EditError, match="integer"):
        apply_json(ir, [{"verb": "inflight", "op": "layers.0.attn.o_proj", "n": "1"}])


def test_inflight_keeps_every_tile_within_the_rows_word(ir_1b):
    # a ring call's cap shares a word with its rows: with any cap, no tile of 65,536 rows or more
    for text in ["tile lm_head n=128256\ninflight layers.0.attn.o_proj n=1",
                 "inflight layers.0.attn.o_proj n=1\ntile lm_head n=128256"]:
        with pytest.raises(EditError, match="tile lm_head smaller"):
            apply_edits(ir_1b, text)
    assert apply_edits(ir_1b, "tile lm_head n=128256").tile("lm_head") == 128256   # without a cap it may


@pytest.mark.parametrize("edits,field,value", [
    ("inflight layers.*.attn.q_proj n=3", "inflight", 3),
    ("ahead layers.*.attn.q_proj n=2\ninflight layers.*.attn.q_proj n=3", "ahead", 2)])
def test_the_ir_text_carries_the_caps_and_parses_back(graphs, edits, field, value):
    ir = apply_edits(make_ir(graphs["llama-tiny"], num_sms=8), edits)
    line = next(ln for ln in ir.text.splitlines() if " layers.0.attn.q_proj " in ln)
    assert f" {field}={value}" in line and (field == "inflight" or " inflight=3 ahead=2 " in line)
    again = parse_ir(ir.text, ir.graph)
    assert (again.knobs.inflight, again.knobs.ahead) == (ir.knobs.inflight, ir.knobs.ahead) and again.text == ir.text
    with pytest.raises(Exception, match=f"{field}= must be a number"):
        parse_ir(ir.text.replace(f"{field}={value}", f"{field}=x", 1), ir.graph)
    with pytest.raises(Exception, match="allowed: 1-"):
        parse_ir(ir.text.replace(f"{field}={value}", f"{field}=99", 1), ir.graph)


def test_codegen_gives_each_capped_matmuls_calls_its_cap_and_compiles(ir_1b):
    ir = apply_edits(ir_1b, expert_edits(ir_1b, levers=("inline", "split", "wave", "cache")))
    plain_src, plain = emit_cuda(ir.plan())
    capped = apply_edits(ir, "inflight layers.*.attn.o_proj n=1\ninflight layers.*.mlp.down_proj n=3")
    src, table = emit_cuda(capped.plan())
    assert "#define WS_INFLIGHT_OPS 0" in plain_src and "#define WS_INFLIGHT_OPS 1" in src
    assert [r & 0xffff for r in table.ws_rows] == plain.ws_rows   # the rows are the same, the caps above them
    caps = [(r >> 16) & 0xff for r in table.ws_rows]
    tasks = {n: len(ids) for n, ids in ir.plan().tg.by_op.items()}
    # o_proj streams inside attn.add's tasks, down_proj inside mlp.add's: one ring call each
    assert caps.count(1) == sum(v for n, v in tasks.items() if n.endswith("attn.add"))
    assert caps.count(3) == sum(v for n, v in tasks.items() if n.endswith("mlp.add"))
    # a bench's inflight_ops pattern comes first where it matches
    _, over = emit_cuda(capped.plan(), inflight_ops=r"attn\.add$:2")
    assert sorted({(r >> 16) & 0xff for r in over.ws_rows}) == [0, 2, 3]
    assert compile_cuda(src, "inflight_edit.cu", arch="sm_90")


def test_the_expert_caps_the_attention_sides_matmuls_on_wide_models_only(ir_1b, graphs):
    names = attention_matmuls(ir_1b)
    assert [n for n in names if n.startswith("layers.0.")] == [f"layers.0.attn.{p}_proj" for p in "qkvo"]
    assert len(names) == 4 * 16
    lines = [ln for ln in expert_edits(ir_1b).splitlines() if ln.startswith("inflight ")]
    assert lines == [f"inflight {n} n=1" for n in names]
    tiny = make_ir(graphs["llama-tiny"], num_sms=8)
    assert attention_matmuls(tiny) and lever_edits(tiny, "inflight") == []   # hidden 64 < INFLIGHT_HIDDEN
    assert INFLIGHT_HIDDEN == 2048


def test_x_bf16_halves_down_projs_staged_input_and_makes_room(ir_1b):
    plan = apply_edits(ir_1b, expert_edits(ir_1b)).plan()
    src, table = emit_cuda(plan)
    src32, table32 = emit_cuda(plan, x_bf16=False)
    # down_proj's 8192-wide input was the largest op scratch: 32 KB as float, 16 KB as bf16
    assert table32.smem_bytes - table.smem_bytes >= 16 * 1024
    assert "dot_bf16x8_x(wv, X8[c])" in src and "X8" not in src32
    assert table.ws_stages == table32.ws_stages == 5
    assert emit_cuda(plan, ring_stages=6)[1].ws_stages == 6   # room for a sixth stage now (measured slower)
    assert compile_cuda(src, "x_bf16.cu", arch="sm_90")


def test_ahead_parses_in_text_and_json_spells_back_and_refuses_naming_the_fix(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    (e,) = parse_edits("ahead layers.*.mlp.gate_proj n=1")
    assert (e.verb, e.op, e.n) == ("ahead", "layers.*.mlp.gate_proj", 1)
    assert e.to_text() == "ahead layers.*.mlp.gate_proj n=1" and e.to_json() == {"verb": "ahead",
                                                                              "op": "layers.*.mlp.gate_proj", "n": 1}
    by_text = apply_edits(ir, "ahead layers.*.mlp.gate_proj n=1")
    by_json = apply_json(ir, [e.to_json()])
    gates = [n for n in ir.ops if n.endswith("mlp.gate_proj")]
    assert by_text.knobs.ahead == by_json.knobs.ahead == {n: 1 for n in gates} and by_text.knobs.inflight == {}
    assert apply_edits(by_text, "ahead layers.*.mlp.gate_proj n=0").text == ir.text   # n=0 undoes it
    for text, msg in [("ahead layers.0.mlp.gate_proj n=8", "allowed: 1-7"),
                      ("ahead layers.0.mlp.silu_mul n=1", "name the matmul"),
                      ("ahead layers.0.mlp.gate_proj", "ahead OP n=N")]:
        with pytest.raises(EditError, match=re.escape(msg)):
            apply_edits(ir, text)
    with pytest.raises(EditError, match="integer"):
        apply_json(ir, [{"verb": "ahead", "op": "layers.0.mlp.gate_proj", "n": True}])


def test_ahead_keeps_every_tile_within_the_rows_word(ir_1b):
    with pytest.raises(EditError, match="tile lm_head smaller"):   # its cap shares the rows word too
        apply_edits(ir_1b, "ahead layers.0.mlp.gate_proj n=1\ntile lm_head n=128256")


def test_codegen_gives_ahead_matmuls_calls_their_cap_while_waiting_and_compiles(ir_1b):
    ir = apply_edits(ir_1b, expert_edits(ir_1b))
    plain_src, plain = emit_cuda(ir.plan())
    ahead = apply_edits(ir, "ahead layers.*.mlp.gate_proj n=1\nahead layers.*.mlp.up_proj n=1")
    src, table = emit_cuda(ahead.plan())
    assert "#define WS_AHEAD 0" in plain_src and "#define WS_AHEAD 1" in src and "#define WS_AHEAD_CAP 0" in src
    # the rows and the per-op caps are the expert's; gate/up's calls carry 1 in bits 21-23 beside them
    assert [r & 0x1fffff for r in table.ws_rows] == plain.ws_rows
    marked = [(r >> 21) & 7 for r in table.ws_rows]
    tasks = {n: len(ids) for n, ids in ir.plan().tg.by_op.items()}
    assert marked.count(1) == 2 * sum(v for n, v in tasks.items() if n.endswith("mlp.silu_mul"))   # gate and up
    assert set(marked) == {0, 1}
    # a task with capped stages (gate/up's, run by silu_mul's tasks) carries where its ring segments end in
    # its queue's stream; every other task carries 0 and its body does not open anything (MK_OPEN)
    tasks_of = ahead.plan().tg.tasks
    for q in range(len(table.qs_start) - 1):
        ends, p = [], table.qs_start[q]
        while p < table.qs_start[q + 1]:
            t, nw, nc, ns, npf = table.q_stream[p:p + 5]
            assert bool(nc >> 16) == tasks_of[t].op.endswith("mlp.silu_mul"), (q, t)
            if nc >> 16:
                ends.append(nc >> 16)
            p += 5 + 2 * nw + 5 * (nc & 0xffff) + ns + 4 * npf
        assert ends == sorted(set(ends)) and all(0 < e <= table.ws_start[q + 1] - table.ws_start[q] for e in ends)
    assert src.count("MK_OPEN();   // its input") == 1   # the one body gate/up/silu_mul share
    assert compile_cuda(src, "ahead_edit.cu", arch="sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("edits", ["inflight layers.*.attn.*_proj n=1\ninflight layers.*.mlp.down_proj n=3",
                                   "ahead layers.*.mlp.gate_proj n=1\nahead layers.*.mlp.up_proj n=1\n"
                                   "inflight layers.*.attn.*_proj n=1"], ids=["inflight", "ahead"])
def test_the_inflight_and_ahead_edits_give_the_same_bits_on_gpu(edits):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step("llama-tiny", seed)
        ir = make_ir(g, num_sms=8)
        ir = apply_edits(ir, expert_edits(ir))
        _, want = built_runs(ir.plan(), params, feeds, 1)
        _, got = built_runs(apply_edits(ir, edits).plan(), params, feeds, 2)
        for out in got:
            for k in ref:
                assert torch.equal(out[k], want[0][k]), (seed, k)


@pytest.mark.gpu
def test_the_1b_expert_with_x_bf16_and_inflight_gives_the_same_bits_on_gpu():
    for seed in (0, 1, 2):
        plan, params, feeds = expert_1b(seed)
        _, want = built_runs(plan, params, feeds, 1, x_bf16=False)
        _, got = built_runs(plan, params, feeds, 1)
        plain, _, _ = expert_1b(seed, levers=("inline", "split", "wave", "cache"))
        _, uncapped = built_runs(plain, params, feeds, 1)
        for k in want[0]:
            assert torch.equal(got[0][k], want[0][k]), (seed, k)
            assert torch.equal(uncapped[0][k], want[0][k]), (seed, k)
