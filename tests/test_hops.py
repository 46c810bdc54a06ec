"""compiler/hops.py: LL words in place of counters where they can be (emit_cuda hops="ll"). On the
CPU: every dependency of the plan is still enforced, by a wait the kernel keeps or by LL words
alone; LL tensors are activations one op writes in full; plans with impl bodies keep counters. On
the GPU: LL and counters give bit-identical outputs, and a run never takes the run before's words."""
import pytest
import torch
from conftest import assert_1b_expert_same_bits, assert_builds_agree, seeded_step

from megakernel_gym.compiler import ZOO, capture, run_graph
from megakernel_gym.compiler.codegen import CodegenError, emit_cuda
from megakernel_gym.compiler.hops import LL_DTYPES, ONCE, kept_waits, ll_tensors
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]
SCHEDULES = {"default": lambda ir: "", "tuned": tuned_edits, "expert": expert_edits}


def _ir(g, schedule: str, sms: int = 8):
    base = make_ir(g, num_sms=sms)
    return apply_edits(base, SCHEDULES[schedule](base))


def _table_waits(t, task: int) -> list[tuple[int, int]]:
    return list(zip(t.wait_counter[t.wait_start[task]:t.wait_start[task + 1]],
                    t.wait_target[t.wait_start[task]:t.wait_start[task + 1]]))


def _check_every_dependency_enforced(plan, table):
    """Each (task, producer) edge of the plan: the task still waits on a counter the producer adds
    to, or it only reads LL words the producer writes (no write of the task meets the producer's
    reads or writes)."""
    tg, ll = plan.tg, set(table.ll)
    signals = {task: set(table.signal_counter[table.signal_start[task]:table.signal_start[task + 1]])
               for task in range(len(tg.tasks))}
    for t in tg.tasks:
        waited = {p for c, target in _table_waits(table, t.id) for p in plan.counters[c].producers}
        for c, target in _table_waits(table, t.id):   # a kept wait is one its producers still signal
            assert target == len(plan.counters[c].producers)
            assert all(c in signals[p] for p in plan.counters[c].producers)
        for pid in tg.deps[t.id]:
            if pid in waited:
                continue
            p = tg.tasks[pid]
            assert not any(w.overlaps(x) for w in t.writes for x in p.writes + p.reads), (str(t), str(p))
            shared = [r.tensor for r in t.reads for w in p.writes if r.overlaps(w)]
            assert shared and set(shared) <= ll, (str(t), str(p), shared)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", TINY)
def test_every_dependency_is_kept_by_a_wait_or_by_ll_words(graphs, name, schedule):
    plan = _ir(graphs[name], schedule).plan()
    src, table = emit_cuda(plan, hops="ll")
    assert table.ll, "no activation became LL words"
    _check_every_dependency_enforced(plan, table)
    assert len(table.wait_counter) < sum(len(w) for w in plan.waits.values())
    assert "ll_st(((unsigned" in src and compile_cuda(src, f"{name}-{schedule}-ll.cu", arch="sm_90")[:4] == b"\x7fELF"
    # counters: the plan's waits, every one
    _, full = emit_cuda(plan, hops="counters")
    assert not full.ll and all(_table_waits(full, t) == list(plan.waits[t]) for t in plan.waits)
    # the default: LL words with the producer warp, counters with thread 0 (and on the regs path)
    assert emit_cuda(plan)[1].ll == table.ll
    assert not emit_cuda(plan, producer="thread")[1].ll and not emit_cuda(plan, weights="regs")[1].ll
    assert emit_cuda(plan, producer="thread", hops="ll")[1].ll == table.ll


def test_the_1b_expert_keeps_no_counter_waits():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    plan = _ir(g, "expert", sms=132).plan()
    _, table = emit_cuda(plan, hops="ll")
    _check_every_dependency_enforced(plan, table)
    # the residual stream, q/k/v, attention and the MLP's product: LL words in every layer
    assert {f"layers.{i}.{t}" for i in range(16) for t in ("attn.add", "mlp.add", "attn.q_proj", "attn.k_proj",
                                                           "attn.v_proj", "attn.decode_attention", "mlp.silu_mul")} \
        <= set(table.ll)
    # nothing is left to count: the KV caches, the one kind of data not kept as LL words, are written
    # by the attention tasks that read them (the expert fuses the cache writes into the attention)
    assert table.wait_counter == []
    unfused = apply_edits(make_ir(g, num_sms=132), expert_edits(make_ir(g, num_sms=132),
                                                                 levers=("inline", "split", "wave"))).plan()
    _, table = emit_cuda(unfused, hops="ll")
    kinds = {unfused.tg.tasks[p].op.rsplit(".", 1)[-1] for c in table.wait_counter for p in unfused.counters[c].producers}
    assert kinds == {"k_cache_write", "v_cache_write"}   # without it: attention's waits on its cache writes


@pytest.mark.parametrize("name", TINY)
def test_ll_tensors_are_activations_one_op_writes_in_full(graphs, name):
    plan = _ir(graphs[name], "expert").plan()
    _, table = emit_cuda(plan, hops="ll")
    g, tg = plan.tg.graph, plan.tg
    for b in table.ll:
        spec = g.tensors[b]
        assert spec.kind == "activation" and spec.dtype in LL_DTYPES and b not in g.outputs
        writers = [o.name for o in g.ops if o.kind != "view" and any(table.aliases[t] == b for t in o.outputs)]
        assert len(writers) == 1 and tg.by_op[writers[0]]
        covered = sorted(s for tid in tg.by_op[writers[0]] for r in tg.tasks[tid].writes if r.tensor == b
                         for s in r.spans)
        n = 1
        for d in spec.shape:
            n *= d
        assert covered[0][0] == 0 and max(hi for _, hi in covered) == n
        assert all(a[1] >= b_[0] for a, b_ in zip(covered, covered[1:]))   # no gap


def test_ll_tensors_refuse_what_a_poll_cannot_guard(graphs):
    plan = _ir(graphs["llama-tiny"], "expert").plan()
    g = plan.tg.graph
    base = {t: t for t in g.tensors}
    act = next(b for b in g.tensors if g.tensors[b].kind == "activation"
               and any(o.outputs == [b] for o in g.ops if plan.tg.by_op.get(o.name)))
    writer = next(o.name for o in g.ops if o.outputs == [act])
    assert ll_tensors(plan, {act: {"store", "stage"}}, base, set()) == {act}
    # read many times per task (a generic matmul's x), reached by raw pointer, never stored, or
    # written again by a consumer that runs its producer fused: not LL
    assert not ll_tensors(plan, {act: {"store", "load matmul"}}, base, set())
    assert not ll_tensors(plan, {act: {"store", "raw"}}, base, set())
    assert not ll_tensors(plan, {act: {"stage"}}, base, set())
    assert not ll_tensors(plan, {act: {"store", "stage"}}, base, {writer})
    # graph inputs, outputs and buffers: read or written outside the kernel
    for b in g.tensors:
        if g.tensors[b].kind in ("input", "output", "buffer", "weight"):
            assert not ll_tensors(plan, {b: {"store"}}, base, set()), b
    assert "load matmul" not in ONCE and "raw" not in ONCE
    assert kept_waits(plan, frozenset()) is plan.waits


def test_impl_bodies_and_the_counters_knob_keep_every_counter(graphs):
    ir = make_ir(graphs["mlp-tiny"], num_sms=8)
    op = next(o.name for o in graphs["mlp-tiny"].ops if o.kind == "elementwise")
    ir = apply_edits(ir, f"impl {op} <<<\nfor (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = in0[i];\n>>>")
    _, table = emit_cuda(ir.plan(), impls=ir.impls, hops="ll")
    assert not table.ll and len(table.wait_counter) == sum(len(w) for w in ir.plan().waits.values())
    with pytest.raises(CodegenError, match="hops 'flags' is not one of ll, counters"):
        emit_cuda(ir.plan(), hops="flags")


# ---------------------------------------------------------------------------------------------
# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_ll_words_and_counters_agree_bit_for_bit_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        for schedule in SCHEDULES:
            plan = _ir(g, schedule).plan()
            mk = assert_builds_agree(plan, params, feeds, ref, {"hops": "ll"}, {"hops": "counters"}, 2,
                                     f"{name} seed {seed} {schedule}")
            assert mk.table.ll


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama-tiny", "mlp-tiny"])
def test_a_run_never_takes_the_run_befores_words_on_gpu(name):
    """Runs back to back, nothing poisoned between them, the input changed each time: each output is
    its own input's (a reader that took a word from the run before would give the earlier one's)."""
    from megakernel_gym.compiler.runtime import Megakernel
    g, params, feeds, _ = seeded_step(name, 0)
    plan = _ir(g, "expert").plan()
    mk = Megakernel(plan, hops="ll")
    launch = mk.bind(params, feeds)
    x_name = g.inputs[0]
    x0 = feeds[x_name]
    for k in range(4):
        x = (x0 + k) % 7 if not x0.is_floating_point() else x0 * (1 + k)
        launch.input(x_name).copy_(x.to(launch.input(x_name).device).view(launch.input(x_name).shape))
        launch()
        launch.check()
        ref = run_graph(g, params, {**feeds, x_name: x})
        for out_name in g.outputs:
            torch.testing.assert_close(launch.outputs()[out_name].cpu().float(), ref[out_name].float(),
                                       atol=1e-4, rtol=1e-4, msg=f"{name} run {k} {out_name}")
    with pytest.raises(ValueError, match="LL words"):
        launch.input(mk.table.ll[0])


@pytest.mark.gpu
def test_the_1b_expert_with_ll_words_is_the_counters_output_on_gpu():
    assert_1b_expert_same_bits(1, hops="ll")
