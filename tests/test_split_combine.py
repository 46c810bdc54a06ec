"""Who combines a split attention's parts (emit_cuda combine=): the last part to finish, into the op's
output ("last"), or each reader while it stages the output as a streamed matmul's input ("reader").
On the CPU: which outputs the readers combine and which they cannot, and the sources compile. On
the GPU: both give the same
bits, and the graph's numbers, over seeds, split counts and poisoned runs.
Also when a part prefetches its slice of the KV caches (emit_cuda kv_prefetch=): before its waits
or at its body's start."""
import pytest
from conftest import assert_1b_expert_same_bits, assert_builds_agree, seeded_step

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import CodegenError, _Emitter, emit_cuda
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

TINY = ["llama-tiny", "attention-tiny"]


def _split(ir, n: int):
    """The tuned schedule with every attention split n ways."""
    kinds = {o.name: o.kind for o in ir.graph.ops}
    lines = [f"split {o} n={n}" for o in ir.ops if kinds[o] == "decode_attention"]
    return apply_edits(ir, tuned_edits(ir) + "\n" + "\n".join(lines))


def _attention_ops(g) -> list[str]:
    return [o.name for o in g.ops if o.kind == "decode_attention"]


@pytest.mark.parametrize("name", TINY)
def test_readers_combine_split_outputs_that_only_streamed_matmuls_read(graphs, name):
    g = graphs[name]
    plan = _split(make_ir(g, num_sms=8), 3).plan()
    em = _Emitter(plan, combine="reader")
    assert sorted(em.deferred.values()) == sorted(_attention_ops(g))
    assert _Emitter(plan).deferred == {}                      # "last" is the default
    last, _ = emit_cuda(plan)
    reader, _ = emit_cuda(plan, combine="reader")
    assert "mk_last" in last and "mk_last" not in reader      # no part counts itself in
    assert "__ldcg((const float4*)" in reader
    assert compile_cuda(reader, f"{name}-reader.cu", arch="sm_90")[:4] == b"\x7fELF"


def test_a_reader_with_its_own_body_keeps_the_last_part_combining(graphs):
    g = graphs["llama-tiny"]
    plan = _split(make_ir(g, num_sms=8), 3).plan()
    first = _attention_ops(g)[0]
    plain = _Emitter(plan, combine="reader")
    out = next(b for b, op in plain.deferred.items() if op == first)
    reader = next(o.name for o in g.ops if o.kind == "matmul" and plain.base[o.inputs[0]] == out)
    em = _Emitter(plan, impls={reader: "  (void)lo; (void)hi;\n"}, combine="reader")
    assert first not in em.deferred.values()
    assert len(em.deferred) == len(_attention_ops(g)) - 1
    # unsplit attention has nothing to combine
    assert _Emitter(apply_edits(make_ir(g, num_sms=8), tuned_edits(make_ir(g, num_sms=8))).plan(),
                    combine="reader").deferred == {}


def test_a_bad_combine_is_refused(graphs):
    plan = _split(make_ir(graphs["llama-tiny"], num_sms=8), 2).plan()
    with pytest.raises(CodegenError, match="combine 'first' is not one of last, reader"):
        emit_cuda(plan, combine="first")


def test_the_1b_experts_sixteen_attentions_are_combined_by_their_readers():
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=132)
    plan = apply_edits(base, expert_edits(base)).plan()
    src, _ = emit_cuda(plan, combine="reader")
    assert sorted(_Emitter(plan, combine="reader").deferred.values()) == sorted(_attention_ops(g))
    assert "mk_last" not in src and compile_cuda(src, "1b-reader.cu", arch="sm_90")[:4] == b"\x7fELF"
    ll, _ = emit_cuda(plan, combine="reader", hops="ll")     # the outputs never stored are no LL words
    assert compile_cuda(ll, "1b-reader-ll.cu", arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", TINY)
def test_a_split_part_prefetches_its_kv_slice_before_its_waits(graphs, name):
    """kv_prefetch="wait": the slice's L2 prefetches move out of the attention's body into its pre_N
    function, which the task loop calls before the control warp polls; "body" (the default) keeps
    them after the waits. Unsplit attention (its whole cache is a scheduled prefetch) has none."""
    plan = _split(make_ir(graphs[name], num_sms=8), 3).plan()
    early, _ = emit_cuda(plan, kv_prefetch="wait")
    late, _ = emit_cuda(plan)
    pre = early.split("__device__ __forceinline__ void pre_")[1].split("\n}\n")[0]
    assert pre.count("prefetch.global.L2 [%0]") == 2 and "n_all" in pre
    loop = early.split("extern \"C\" __global__")[1]
    assert loop.index("pre_") < loop.index("ld_acquire(&counters[W[2 * w]])")   # before the waits
    bodies = [b for b in early.split("void op_")[1:] if "decode_attention" in b.split("\n", 2)[1]]
    assert bodies and all("prefetch.global.L2 [%0]" not in b.split("\n}\n")[0] for b in bodies)
    assert "void pre_" not in late and late.count("prefetch.global.L2 [%0]") == 2
    assert compile_cuda(early, f"{name}-kv-early.cu", arch="sm_90")[:4] == b"\x7fELF"
    unsplit = apply_edits(make_ir(graphs[name], num_sms=8), tuned_edits(make_ir(graphs[name], num_sms=8))).plan()
    assert "void pre_" not in emit_cuda(unsplit, kv_prefetch="wait")[0]
    with pytest.raises(CodegenError, match="kv_prefetch 'never' is not one of wait, body"):
        emit_cuda(plan, kv_prefetch="never")


# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_kv_slices_prefetched_before_or_after_the_waits_give_the_same_bits_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        plan = _split(make_ir(g, num_sms=8), 3).plan()
        assert_builds_agree(plan, params, feeds, ref, {"kv_prefetch": "wait"}, {}, what=f"{name} seed {seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_reader_and_last_part_combines_agree_bit_for_bit_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        for n in (2, 3, 7):
            plan = _split(make_ir(g, num_sms=8), n).plan()
            assert_builds_agree(plan, params, feeds, ref, {"combine": "reader"}, {"combine": "last"},
                                runs=3, what=f"{name} seed {seed} n={n}")


@pytest.mark.gpu
def test_the_1b_expert_combined_by_readers_is_the_last_parts_output_on_gpu():
    assert_1b_expert_same_bits(2, combine="reader")
