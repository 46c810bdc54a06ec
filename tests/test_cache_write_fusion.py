"""A KV-cache write fused into the decode attention that reads the cache (`fuse k_cache_write into
decode_attention`): each attention task writes the step's row of its kv heads as a prologue call and
then reads the cache, so the attention waits for the k/v projections, not for a cache-write task.
On the CPU: the edit is accepted for that pair only, the VM computes the same outputs and caches
under adversarial schedules, the attention's waits, and the source compiles. Also emit_cuda's
hold_ops (a ring call's own count of held stages). On the GPU: the same bits as the unfused plan."""
import re

import pytest
import torch
from conftest import built_runs, seeded_step

from megakernel_gym.compiler import ZOO, capture, check, module_tensors, predict, run_graph, run_plan
from megakernel_gym.compiler.codegen import CodegenError, _Emitter, emit_cuda, parse_hold_ops
from megakernel_gym.ir_exposure import EditError, apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

TINY = ["llama-tiny", "attention-tiny"]


def _fuse_lines(g) -> str:
    """`fuse C into A` for every cache write C of the graph and the attention A that reads its cache."""
    lines = []
    for op in g.ops:
        if op.kind == "cache_write":
            att = next(o.name for o in g.ops if o.kind == "decode_attention" and op.outputs[0] in o.inputs)
            lines.append(f"fuse {op.name} into {att}")
    return "\n".join(lines)


def _plans(g, split: int, num_sms: int = 8):
    """(the tuned schedule with every attention split `split` ways, the same with the cache writes fused)."""
    ir = make_ir(g, num_sms=num_sms)
    splits = "\n".join(f"split {o.name} n={split}" for o in g.ops if o.kind == "decode_attention")
    base = tuned_edits(ir) + "\n" + splits
    return apply_edits(ir, base).plan(), apply_edits(ir, base + "\n" + _fuse_lines(g)).plan()


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("split", [1, 3])
def test_fused_cache_writes_compute_the_same_outputs_and_caches_in_the_vm(graphs, name, split):
    g = graphs[name]
    plain, fused = _plans(g, split)
    assert check(fused) == []
    writes = [o.name for o in g.ops if o.kind == "cache_write"]
    assert writes and all(fused.tg.by_op[w] == [] for w in writes)
    model, inputs = ZOO[name]()
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    truth = run_graph(g, params, feeds)
    assert any(k.endswith("cache") for k in truth)          # the caches are outputs: their new rows are checked
    want = run_plan(plain, params, feeds, rng=0)
    for seed in range(4):
        got = run_plan(fused, module_tensors(model), feeds, rng=seed, adversarial=True)
        for k in truth:
            assert torch.equal(got[k], want[k]), (k, seed)
            torch.testing.assert_close(got[k], truth[k], atol=1e-5, rtol=1e-5)


def test_fused_attention_waits_for_the_projections_not_a_cache_write(graphs):
    g = graphs["llama-tiny"]
    plain, fused = _plans(g, 2)
    tg = fused.tg
    kinds = {o.name: o.kind for o in g.ops}
    for tid in tg.by_op["layers.0.attn.decode_attention"]:
        task = tg.tasks[tid]
        assert [kinds[p] for p, _ in task.prologue].count("cache_write") == 2
        assert {kinds[tg.tasks[d].op] for d in tg.deps[tid]} <= {"matmul", "elementwise", "rmsnorm", "rope"}
    assert len(tg.tasks) < len(plain.tg.tasks)
    # one hop fewer on the attention's path: the sim prices it
    assert predict(fused).latency_us < predict(plain).latency_us


def test_only_a_cache_write_into_its_attention_fuses_past_the_state_rule(graphs):
    g = graphs["llama-tiny"]
    ir = make_ir(g, num_sms=8)
    with pytest.raises(EditError, match="only into the decode_attention that reads the cache"):
        apply_edits(ir, "fuse layers.0.attn.k_cache_write into layers.0.attn.o_proj")
    with pytest.raises(EditError, match="does not depend on layers.0.attn.k_cache_write"):
        apply_edits(ir, "fuse layers.0.attn.k_cache_write into layers.1.attn.decode_attention")
    last = g.ops[-1].name                               # writes the model's output
    with pytest.raises(EditError, match="must leave in memory"):
        apply_edits(ir, f"fuse {last} into {g.ops[0].name}")
    fused = apply_edits(ir, "fuse layers.0.attn.v_cache_write into layers.0.attn.decode_attention")
    assert "v_cache_write" in fused.text and fused.plan().tg.by_op["layers.0.attn.v_cache_write"] == []


@pytest.mark.parametrize("name", TINY)
def test_fused_cache_write_source_compiles_for_hopper(graphs, name):
    _, fused = _plans(graphs[name], 3)
    src, _ = emit_cuda(fused)
    assert compile_cuda(src, f"{name}_cw.cu", arch="sm_90")


def test_the_attention_takes_its_fused_producers_into_its_body(graphs):
    g = graphs["llama-tiny"]
    plain, fused = _plans(g, 2)
    em = _Emitter(fused)
    a = em.absorbed["layers.0.attn.decode_attention"]
    assert a["ops"] == {"layers.0.attn.q_rope", "layers.0.attn.k_rope", "layers.0.attn.k_cache_write",
                        "layers.0.attn.v_cache_write"}
    assert a["q"][1].name == "layers.0.attn.q_rope" and a["kc"][2].name == "layers.0.attn.k_rope"
    assert a["vc"][2] is None
    att = fused.tg.tasks[fused.tg.by_op["layers.0.attn.decode_attention"][0]]
    assert em.prologue_calls(att) == []                     # nothing left to call: the body does it
    from megakernel_gym.compiler.costmodel import task_trips
    assert task_trips(fused)[att.id] == 2 + 2 + 1           # q.k, p.V; the split's partials; the staged inputs
    assert _Emitter(fused, step_inputs="calls").absorbed == {}
    assert [p for p, _ in _Emitter(fused, step_inputs="calls").prologue_calls(att)] == [p for p, _ in att.prologue]
    body, _ = emit_cuda(fused)
    calls, _ = emit_cuda(fused, step_inputs="calls")
    assert body.count("const int tid_ = threadIdx.x - ") >= 3 and "tid_" not in calls
    assert compile_cuda(body, "absorbed.cu", arch="sm_90")
    with pytest.raises(CodegenError, match="step_inputs 'never' is not one of body, calls"):
        emit_cuda(fused, step_inputs="never")
    # where q's rope computes its own producer (a matmul fused into it), the prologue calls stay
    ir = make_ir(g, num_sms=8)
    splits = "\n".join(f"split {o.name} n=2" for o in g.ops if o.kind == "decode_attention")
    deeper = apply_edits(ir, tuned_edits(ir) + "\n" + splits + "\n" + _fuse_lines(g)
                         + "\nfuse layers.0.attn.q_proj into layers.0.attn.q_rope").plan()
    assert set(_Emitter(deeper).absorbed) == {"layers.1.attn.decode_attention"}


def test_the_1b_expert_with_fused_cache_writes_is_valid_and_predicted_faster():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    expert = apply_edits(base, expert_edits(base, levers=("inline", "split", "wave"))).plan()
    # the expert's lever "cache" fuses them (its inflight lever left out of both, as it is not the point)
    fused = apply_edits(base, expert_edits(base, levers=("inline", "split", "wave", "cache"))).plan()
    assert _fuse_lines(g) in expert_edits(base)
    assert check(fused) == []
    assert len(fused.tg.tasks) == len(expert.tg.tasks) - 2 * 8 * 16    # 8 kv heads' k and v writes, 16 layers
    assert predict(fused).latency_us < predict(expert).latency_us


def test_hold_ops_sets_a_ring_calls_own_held_stages(graphs):
    g = graphs["llama-tiny"]
    plan = apply_edits(make_ir(g, num_sms=8), expert_edits(make_ir(g, num_sms=8))).plan()
    plain, _ = emit_cuda(plan)
    held, _ = emit_cuda(plan, hold_ops=r"mlp\.add$:0")
    some, _ = emit_cuda(plan, hold_ops={r"attn\.add$": 2})
    assert "s + 0 < nst" not in plain and "s + 0 < nst" in held and "min(2, WS_STAGES - 1)" in some
    assert held.count("s + WS_HOLD < nst") < plain.count("s + WS_HOLD < nst")
    assert compile_cuda(held, "held.cu", arch="sm_90")
    assert parse_hold_ops(r"a:1;b\.c$:0") == (("a", 1), (r"b\.c$", 0))
    assert parse_hold_ops(None) == ()
    for bad, msg in [("mlp.add", "write PATTERN:N"), ("mlp.add:x", "write PATTERN:N"), ("(:1", "not a regular"),
                     ({"a": 16}, "0 to 15")]:
        with pytest.raises(CodegenError, match=re.escape(msg)):
            emit_cuda(plan, hold_ops=bad)


# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_fused_cache_writes_give_the_unfused_bits_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        for split in (1, 3):
            plain, fused = _plans(g, split)
            _, got = built_runs(fused, params, feeds, 3)
            _, calls = built_runs(fused, params, feeds, 1, step_inputs="calls")
            _, counters = built_runs(fused, params, feeds, 1, hops="counters")   # the staging's plain loads
            _, want = built_runs(plain, params, feeds, 1)
            for out in got + calls + counters:
                for k, v in ref.items():
                    assert torch.equal(out[k], want[0][k]), f"{name} seed {seed} split {split} {k}"
                    torch.testing.assert_close(out[k].cpu().float(), v.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_the_1b_expert_with_fused_cache_writes_and_hold_ops_gives_the_experts_bits_on_gpu():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    model, inputs = ZOO["llama-1b"](seed=2, device="cuda")
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    expert = apply_edits(base, expert_edits(base, levers=("inline", "split", "wave"))).plan()
    fused = apply_edits(base, expert_edits(base)).plan()
    _, want = built_runs(expert, params, feeds, 1)
    for plan, knobs in [(fused, {}), (fused, {"step_inputs": "calls"}), (expert, {"step_inputs": "calls"}),
                        (expert, {"hold_ops": r"mlp\.add$:0"})]:
        _, got = built_runs(plan, params, feeds, 2, **knobs)
        for out in got:
            for k in out:
                assert torch.isfinite(out[k].float()).all(), k
                assert torch.equal(out[k], want[0][k]), (k, knobs)
