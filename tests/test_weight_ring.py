"""The weight ring: streamed matmuls fed from shared memory by bulk copies that a block issues in
queue order, ahead of the counters. On the CPU: the ring's stream is exactly the ring-fed calls'
weight rows, the ring fits beside every op's shared memory, plans with impl bodies (promised all
of SMEM_LIMIT) fall back to register loads, and both paths compile. On the GPU: the ring and the
register path give bit-identical outputs (the same products summed in the same order), run after
run, on three seeds of the tiny models and on the 1B's expert schedule."""
import pytest
import torch
from conftest import assert_1b_expert_same_bits, assert_builds_agree, built_runs, poisoned_runs, seeded_step

from megakernel_gym.compiler import ZOO, capture, module_tensors
from megakernel_gym.compiler.codegen import (SMEM_BLOCK, THREADS, WARPS, WS_MAX_STAGES, WS_SEG, WS_STAGE,
                                             CodegenError, emit_cuda)
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.cuda.nvrtc import compile_cuda

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]


def _stages(rows: int, rowb: int) -> int:
    return -(-rows // WARPS) * -(-rowb // WS_SEG)


@pytest.mark.parametrize("name", TINY)
def test_the_ring_streams_every_ring_fed_call_in_queue_order(graphs, name):
    ir = make_ir(graphs[name], num_sms=8)
    ir = apply_edits(ir, tuned_edits(ir))
    plan = ir.plan()
    src, table = emit_cuda(plan)
    assert table.ws_stages >= 2 and "cp.async.bulk.shared::cluster.global.mbarrier" in src
    assert table.ws_stages * WS_STAGE < table.smem_bytes <= SMEM_BLOCK - 1024
    g = plan.tg.graph
    by_name = {o.name: o for o in g.ops}
    # the calls the ring feeds: every call of a streamed matmul (one whose body reads ws_stage)
    ring_fns = {int(body.split("(", 1)[0]) for body in src.split("__device__ __forceinline__ void op_")[1:]
                if "ws_wait(g)" in body.split("\n}\n", 1)[0]}
    assert ring_fns, "no streamed matmul takes the ring"
    # a fused epilogue's one call streams each of its producer matmuls' rows, in turn
    feeds = {table.op_ids[e]: len(ps) for e, ps in table.epilogues.items()}
    assert table.epilogues, "tuned plans fuse their matmuls into real epilogues"
    for qi, q in enumerate(plan.queues):
        want = []
        for t in q:
            for c in range(table.call_start[t], table.call_start[t + 1]):
                rows = table.call_hi[c] - table.call_lo[c]
                if table.call_op[c] in ring_fns and rows > 0:
                    want += [rows] * feeds.get(table.call_op[c], 1)
        lo, hi = table.ws_start[qi], table.ws_start[qi + 1]
        assert table.ws_rows[lo:hi] == want
        for f in range(lo, hi):   # each segment: whole rows of a weight, in bounds
            slot = table.ws_slot[f]
            wname = next(n for n, i in table.slots.items() if i == slot)
            w = g.tensors[wname]
            rowb = w.shape[-1] * {"bfloat16": 2, "float32": 4}[w.dtype]
            assert table.ws_rowb[f] == rowb and table.ws_offset[f] % rowb == 0 and rowb % 16 == 0
            assert table.ws_offset[f] // rowb + table.ws_rows[f] <= w.shape[0]
            assert any(op.kind == "matmul" and op.inputs[1] == wname for op in by_name.values())
    assert sum(_stages(r, b) for r, b in zip(table.ws_rows, table.ws_rowb)) > 0
    # past the ring, every ring-fed matmul's x (staged as float) fits in what the kernel asks for
    for op in g.ops:
        if op.kind == "matmul" and op.name in table.op_ids and table.op_ids[op.name] in ring_fns:
            x = g.tensors[op.inputs[0]].shape
            assert 4 * x[0] * x[-1] <= table.smem_bytes - table.ws_stages * WS_STAGE, op.name
    assert compile_cuda(src, f"{name}-ring.cu", arch="sm_90")[:4] == b"\x7fELF"


def test_the_1b_ring_has_four_stages_and_the_stream_covers_every_weight_row(llama_1b_graph):
    base = make_ir(llama_1b_graph, num_sms=132)
    ir = apply_edits(base, expert_edits(base))
    plan = ir.plan()
    src, table = emit_cuda(plan)
    assert table.ws_stages == WS_MAX_STAGES
    assert compile_cuda(src, "llama-1b-ring.cu", arch="sm_90")[:4] == b"\x7fELF"
    g = plan.tg.graph
    # every weight row of every projection and of the lm_head is streamed exactly once per step
    covered: dict[int, int] = {}
    mask = 0xffff if "#define WS_INFLIGHT_OPS 1" in src else 0xffffff   # the expert's inflight caps sit above the rows
    for slot, off, rows, rowb in zip(table.ws_slot, table.ws_offset, table.ws_rows, table.ws_rowb):
        covered[slot] = covered.get(slot, 0) + (rows & mask)
        assert off % rowb == 0
    mats = [o for o in g.ops if o.kind == "matmul"]
    assert len(covered) == len({o.inputs[1] for o in mats})
    for o in mats:
        assert covered[table.slots[o.inputs[1]]] == g.tensors[o.inputs[1]].shape[0], o.name


def test_the_1b_expert_runs_its_projections_as_real_epilogues(llama_1b_graph):
    """o_proj, gate/up and down each run inside their elementwise consumer's one call: the
    consumer's body stages x once, keeps the matmuls' rows in shared memory and computes its
    output from there, so no producer is a call of its own and no row goes through memory between
    them. The register path keeps the plain calls."""
    base = make_ir(llama_1b_graph, num_sms=132)
    ir = apply_edits(base, expert_edits(base))
    plan = ir.plan()
    src, table = emit_cuda(plan)
    want = {}
    for i in range(16):
        p = f"layers.{i}."
        want[p + "attn.add"] = [p + "attn.o_proj"]
        want[p + "mlp.silu_mul"] = [p + "mlp.gate_proj", p + "mlp.up_proj"]
        want[p + "mlp.add"] = [p + "mlp.down_proj"]
    assert table.epilogues == want
    producers = {p for ps in want.values() for p in ps}
    assert not producers & set(table.op_ids)
    for t in plan.tg.tasks:   # one call per task of a fused consumer
        if t.op in want:
            assert table.call_start[t.id + 1] - table.call_start[t.id] == 1
    bodies = {b.split("(", 1)[0]: b.split("\n}\n", 1)[0] for b in src.split("__device__ __forceinline__ void op_")[1:]}
    silu = bodies[str(table.op_ids["layers.3.mlp.silu_mul"])]
    assert silu.count("block_sum(") == 1 and silu.count("ws_wait(g)") == 2 and "mk_silu(v_a_)" in silu
    _, regs = emit_cuda(plan, weights="regs")
    assert not regs.epilogues and producers <= set(regs.op_ids)


def test_rows_of_1_2_4_or_8_whole_segments_come_as_packed_stages():
    from megakernel_gym.compiler.codegen import ring_packed
    assert all(ring_packed(WS_SEG * n) for n in (1, 2, 4, 8))
    assert not any(ring_packed(b) for b in (WS_SEG // 2, 3 * WS_SEG, 16 * WS_SEG, WS_SEG + 16))


def test_the_1b_expert_multiplies_x_from_registers_and_sums_split_rows_in_order(llama_1b_graph):
    """Rows of 4 KB (q/k/v, o_proj, gate/up) and of 16 KB (down) come as packed stages: one bulk
    copy per stage, each warp on the same columns in every stage, so x (a fused norm's, q/k/v's)
    is read into registers once per call, or (down's, a bf16 tensor kept as bf16: x_bf16) read from
    shared memory with each weight vector; down's rows, four warps each, are summed per segment
    and then in segment order by the last warp. The fused producers' outputs never reach memory:
    only their consumer reads them, from shared memory."""
    from megakernel_gym.compiler.codegen import _Emitter
    base = make_ir(llama_1b_graph, num_sms=132)
    ir = apply_edits(base, expert_edits(base))
    plan = ir.plan()
    src, table = emit_cuda(plan)
    assert "if (a.packed)" in src
    bodies = {b.split("(", 1)[0]: b.split("\n}\n", 1)[0] for b in src.split("__device__ __forceinline__ void op_")[1:]}
    q = bodies[str(table.op_ids["layers.3.attn.q_proj"])]
    down = bodies[str(table.op_ids["layers.3.mlp.add"])]
    assert "float4 xr[16];" in q and "dot_bf16x8(wv, xr[2 * j], xr[2 * j + 1])" in q
    assert "xr[" not in down and "dot_bf16x8_x(wv, X8[c])" in down
    assert "pbuf" not in q and "const int nst = (hi - lo + 7) / 8, cs = warp % 1;" in q
    assert "const int nst = (hi - lo + 1) / 2, cs = warp % 4;" in down and "c < 4; ++c) v += pbuf[((g & 1)" in down
    em = _Emitter(plan)
    g = plan.tg.graph
    for name in ("layers.3.attn.o_proj", "layers.3.mlp.gate_proj", "layers.3.mlp.down_proj"):
        assert em.kept_only(g.op(name).outputs[0]), name
    assert not em.kept_only(g.op("layers.3.attn.add").outputs[0])   # the residual: read by norm and add
    assert not em.kept_only(g.outputs[0])


def test_ring_depth_knobs(graphs):
    ir = make_ir(graphs["mlp-tiny"], num_sms=8)
    plan = apply_edits(ir, tuned_edits(ir)).plan()
    src, table = emit_cuda(plan, ring_stages=3, l2_ahead=2)
    assert table.ws_stages == 3 and "#define WS_L2_AHEAD 2" in src
    assert compile_cuda(src, "mlp-tiny-l2.cu", arch="sm_90")[:4] == b"\x7fELF"
    assert "#define WS_L2_AHEAD 0" in emit_cuda(plan)[0] and "ws_l2(ws.issued + WS_L2_WAIT)" not in emit_cuda(plan)[0]
    src = emit_cuda(plan, l2_wait=4)[0]
    assert "#define WS_L2_WAIT 4" in src and "ws_l2(ws.issued + WS_L2_WAIT)" in src
    assert compile_cuda(src, "mlp-tiny-l2-wait.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="ring takes 2-16 stages"):
        emit_cuda(plan, ring_stages=1)
    # a call's last stage is refilled after the task's signal (WS_REFILL), not before its fence: by
    # thread 0 as it issues the copies, or, with the producer warp (the default), by thread 0
    # releasing the stage the call held back
    src = emit_cuda(plan, producer="thread")[0]
    assert "s + 1 < nst) ws_pump(g + 1 + WS_STAGES)" in src and "if (threadIdx.x == 0) ws_pump(g + 1" not in src
    signal, refill = src.index("red.relaxed.gpu.global.add.u32"), src.index("    WS_REFILL;")
    assert signal < refill and "ws_pump(ws.done + WS_STAGES)" in src
    src = emit_cuda(plan)[0]
    assert "if (s + WS_HOLD < nst) ws_release(g);" in src and "ws.held = g - ws.nheld;" in src
    signal, refill = src.index("red.relaxed.gpu.global.add.u32"), src.index("    WS_REFILL;")
    assert signal < refill and "#define WS_REFILL do { if (threadIdx.x == 0) ws_unhold(); } while (0)" in src
    # the warp that polls and signals: warp 1 leaves thread 0 to the ring's bulk copies alone
    src = emit_cuda(plan, control_warp=1)[0]
    assert "#define MK_CONTROL_WARP 1" in src and "#define MK_CONTROL_WARP 0" in emit_cuda(plan)[0]
    assert compile_cuda(src, "mlp-tiny-control-warp.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="control_warp=8: a block has warps 0-7"):
        emit_cuda(plan, control_warp=8)


def _op_bodies(src: str) -> list[str]:
    return [b.split("\n}\n", 1)[0] for b in src.split("__device__ __forceinline__ void op_")[1:]]


@pytest.mark.parametrize("name", TINY)
def test_a_producer_warp_feeds_the_ring_and_the_bodies_never_wait_for_it(graphs, name):
    """producer="warp" (the default): a ninth warp issues every stage's copies (ws_produce) and
    leaves the task loop; the compute warps release each stage on its empty barrier instead of
    syncing the block per stage (a call's last stage is held until thread 0 releases it), and every
    barrier and thread count in a body is the compute warps' (barrier 1)."""
    base = make_ir(graphs[name], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    src, table = emit_cuda(plan)   # the default: with maxnreg the producer's warp comes with its warpgroup
    thread_src, thread_table = emit_cuda(plan, producer="thread", hops="ll")   # the default's hops
    assert table.threads == THREADS + 128 and thread_table.threads == THREADS
    assert emit_cuda(plan, maxnreg=0)[1].threads == THREADS + 32
    assert "#define WS_PRODUCER_WARP 1" in src and "#define WS_PRODUCER_WARP 0" in thread_src
    assert f"__launch_bounds__({THREADS + 128}, 1)" in src and f"__launch_bounds__({THREADS}, 1)" in thread_src
    # the same tables: only who issues the copies differs
    assert (table.ws_rows, table.ws_rowb, table.ws_offset, table.q_stream) == \
        (thread_table.ws_rows, thread_table.ws_rowb, thread_table.ws_offset, thread_table.q_stream)
    ring = [b for b in _op_bodies(src) if "ws_wait(g)" in b]
    assert ring
    for b in ring:
        assert "ws_release(g);" in b and "ws_pump" not in b and "__syncthreads" not in b and "blockDim" not in b
        assert "if (threadIdx.x == 0) ws_unhold();" in b
        loop = b[b.index("for (int s = 0; s < nst"):]
        assert "MK_SYNC()" not in loop.split("MK_PROBE(PROBE_LAST)")[0], "no block barrier per stage"
    for b in _op_bodies(thread_src):
        if "ws_wait(g)" in b:
            assert "ws_release" not in b and "ws_pump(g + 1 + WS_STAGES)" in b
    main = src[src.index("megakernel("):]
    assert "if (threadIdx.x == MK_NT) ws_produce();" in main and "#define MK_SYNC() asm volatile(\"bar.sync 1, 256;" in src
    assert compile_cuda(src, f"{name}-producer-warp.cu", arch="sm_90")[:4] == b"\x7fELF"


def test_maxnreg_gives_the_compute_warps_the_producers_registers(graphs, monkeypatch):
    """maxnreg (issue 39): 288 threads put three warps on one of the SM's four register files, so ptxas
    caps the kernel at 168 registers, and one-off op bodies made GPT-2's searched schedules spill
    (sim_spills.json). With maxnreg the producer's warp comes with a whole warpgroup, which gives its
    registers back (setmaxnreg.dec to 504 - 2 * maxnreg) before the compute warps take maxnreg
    (setmaxnreg.inc); sm_90a only, so the kernel is compiled for it on an sm_90 GPU and keeps the cap
    on any other arch. Off by default (0)."""
    from megakernel_gym.compiler import codegen, runtime
    from megakernel_gym.cuda import nvrtc
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    src, table = emit_cuda(plan, maxnreg=216)
    assert table.threads == THREADS + 128 and table.maxnreg == 216
    assert f"__launch_bounds__({THREADS + 128}, 1)" in src
    assert "#define MK_MAXNREG 216" in src and "#define MK_PRODUCER_REGS 72" in src
    main = src[src.index("megakernel("):]
    assert main.index("setmaxnreg.dec") < main.index("ws_produce();") < main.index("setmaxnreg.inc") \
        < main.index("for (int p = 0; p < qn;)")
    monkeypatch.setattr(nvrtc, "_default_arch", lambda: "sm_90")
    assert runtime.megakernel_arch(table) == "sm_90a"
    for arch in ("sm_90a", "sm_90"):    # the setmaxnreg lines are compiled only where the arch has them
        assert compile_cuda(src, f"llama-tiny-maxnreg-{arch}.cu", arch=arch)[:4] == b"\x7fELF"
    monkeypatch.setattr(nvrtc, "_default_arch", lambda: "sm_80")
    assert runtime.megakernel_arch(table) == "sm_80"
    # maxnreg=0: the producer's warp alone, ptxas's cap, the GPU's own arch
    src0, table0 = emit_cuda(plan, maxnreg=0)
    assert table0.threads == THREADS + 32 and table0.maxnreg == 0 and "#define MK_MAXNREG 0" in src0
    monkeypatch.setattr(nvrtc, "_default_arch", lambda: "sm_90")
    assert runtime.megakernel_arch(table0) == "sm_90"
    # no producer warp (thread 0's ring or no ring): nothing to give registers back, so maxnreg is moot
    assert emit_cuda(plan, maxnreg=216, producer="thread", hops="ll")[1].maxnreg == 0
    with pytest.raises(CodegenError, match=r"maxnreg=220: the compute warps take 0 \(ptxas's 168\) or one of 176"):
        emit_cuda(plan, maxnreg=220)
    assert codegen.MAXNREG == 216 and emit_cuda(plan)[1].maxnreg == 216   # the default
    assert 504 - 2 * max(codegen.MAXNREGS) == 72


@pytest.mark.gpu
def test_maxnreg_computes_the_same_bits():
    assert_1b_expert_same_bits(3, maxnreg=216)


def test_a_producer_warp_sums_a_row_over_several_warps_among_those_warps(llama_1b_graph):
    """The 1B's down_proj rows (16 KB: four segments, four warps) are summed by the row's last warp
    after a named barrier of just those four warps (2 + row), in segment order, as thread 0's ring
    does after its block barrier."""
    base = make_ir(llama_1b_graph, num_sms=132)
    src, table = emit_cuda(apply_edits(base, expert_edits(base)).plan(), producer="warp")
    assert table.ws_stages == WS_MAX_STAGES and table.threads == THREADS + 128   # the producer warpgroup (maxnreg)
    down = [b for b in _op_bodies(src) if "c < 1024" in b and "ws_wait(g)" in b]
    assert down
    for b in down:
        assert 'asm volatile("bar.sync %0, 128;" :: "r"(2 + warp / 4)' in b
        assert "if (warp % 4 == 3)" in b and "warp / 4 * 4 + c]" in b
    assert compile_cuda(src, "llama-1b-producer-warp.cu", arch="sm_90")[:4] == b"\x7fELF"


def test_a_bad_producer_or_l2_lookahead_with_a_producer_warp_is_refused(graphs):
    ir = make_ir(graphs["mlp-tiny"], num_sms=8)
    plan = apply_edits(ir, tuned_edits(ir)).plan()
    with pytest.raises(CodegenError, match="producer 'dma' is not one of thread, warp"):
        emit_cuda(plan, producer="dma")
    with pytest.raises(CodegenError, match="l2_wait is thread 0's prefetch"):
        emit_cuda(plan, producer="warp", l2_wait=4)
    # with no producer named, thread 0's prefetch takes thread 0 as the producer
    assert emit_cuda(plan, l2_wait=4)[1].threads == THREADS
    # the L2 lookahead: the producer warp sends the stages past the ring to L2 before it waits
    src, table = emit_cuda(plan, l2_ahead=3)
    assert table.threads == THREADS + 128 and "#define WS_L2_AHEAD 3" in src
    produce = src.split("__device__ void ws_produce()")[1].split("\n}\n")[0]
    assert produce.index("ws_stage_l2(a)") < produce.index("ws_wait_bar(")
    assert compile_cuda(src, "mlp-tiny-warp-l2.cu", arch="sm_90")[:4] == b"\x7fELF"
    # how long a staged LL vector's poll pauses before loading again
    assert "#define MK_LL_POLL_NS 0 " in emit_cuda(plan)[0]
    src = emit_cuda(plan, ll_poll_ns=400)[0]
    assert "#define MK_LL_POLL_NS 400 " in src and "__nanosleep(MK_LL_POLL_NS)" in src
    assert compile_cuda(src, "mlp-tiny-ll-poll.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="ll_poll_ns=-1: the pause between polls is 0-100000 ns"):
        emit_cuda(plan, ll_poll_ns=-1)
    # no ring (register path): no producer warp either
    src, table = emit_cuda(plan, producer="warp", weights="regs")
    assert table.threads == THREADS and "#define WS_PRODUCER_WARP 0" in src


def test_the_signal_and_the_held_stages_are_knobs_the_source_shows(graphs):
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    src = emit_cuda(plan)[0]
    assert "#define MK_SIGNAL_RELEASE 0" in src and f"#define WS_HOLD {WS_MAX_STAGES - 1} " in src, \
        "all of the ring's stages but one"
    assert "#define WS_HOLD 1 " in emit_cuda(plan, ring_stages=2)[0] and "#define WS_HOLD 1 " in emit_cuda(plan, hold=1)[0]
    release = emit_cuda(plan, signal="release")[0]
    assert "#define MK_SIGNAL_RELEASE 1" in release and "red.release.gpu.global.add.u32" in release
    held = emit_cuda(plan, hold=3)[0]
    assert "#define WS_HOLD 3 " in held and "if (s + WS_HOLD < nst) ws_release(g);" in held
    assert f"#define WS_HOLD {WS_MAX_STAGES - 1} " in emit_cuda(plan, hold=9)[0], \
        "never more than the ring's stages less one"
    for src in (release, held):
        assert compile_cuda(src, "llama-tiny-signal-hold.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="signal 'sc' is not one of fence, release"):
        emit_cuda(plan, signal="sc")
    with pytest.raises(CodegenError, match="hold=0: a call holds 1 to 15"):
        emit_cuda(plan, hold=0)


def test_impl_plans_and_an_unknown_path_fall_back_or_fail_clearly(graphs):
    ir = make_ir(graphs["mlp-tiny"], num_sms=8)
    mm = next(o.name for o in ir.graph.ops if o.kind == "matmul")
    body = "for (int i = threadIdx.x; i < 1; i += blockDim.x) {}\n"
    with_impl = apply_edits(ir, f"impl {mm} <<<\n{body}>>>")
    src, table = emit_cuda(with_impl.plan(), impls=with_impl.impls)
    assert table.ws_stages == 0 and "ws_pump" not in src and not table.ws_slot
    src, table = emit_cuda(ir.plan(), weights="regs")
    assert table.ws_stages == 0 and "ws_pump" not in src and "ld_stream(W" in src
    assert compile_cuda(src, "mlp-tiny-regs.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="weights 'tma' is not one of smem, regs"):
        emit_cuda(ir.plan(), weights="tma")


@pytest.fixture(scope="module")
def llama_1b_graph():
    return capture(*ZOO["llama-1b"](device="meta"), "llama-1b")


# ---------------------------------------------------------------------------------------------
# on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_ring_and_register_paths_agree_bit_for_bit_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        for edits in ("tuned", "expert"):
            base = make_ir(g, num_sms=8)
            ir = apply_edits(base, tuned_edits(base) if edits == "tuned" else expert_edits(base))
            mk = assert_builds_agree(ir.plan(), params, feeds, ref, {"impls": ir.impls, "weights": "smem"},
                                     {"impls": ir.impls, "weights": "regs"}, 3, f"{name} seed {seed} {edits}")
            assert mk.table.ws_stages >= 2


@pytest.mark.gpu
@pytest.mark.parametrize("producer", ["thread", "warp"])
@pytest.mark.parametrize("name", TINY)
def test_a_ring_of_two_stages_feeds_calls_of_one_stage_on_gpu(name, producer):
    """A call's last stage leaves its buffer to the next call or the signal (WS_REFILL): with two
    stages and tasks of a few rows, a call finds its first stage not yet issued and issues it
    (thread 0), or waits for the stage the call before it held back (producer warp)."""
    g, params, feeds, ref = seeded_step(name, 0)
    base = make_ir(g, num_sms=8)
    ir = apply_edits(base, expert_edits(base))
    mk, ring = built_runs(ir.plan(), params, feeds, 2, impls=ir.impls, ring_stages=2, producer=producer)
    assert mk.table.ws_stages == 2
    _, regs = built_runs(ir.plan(), params, feeds, 1, impls=ir.impls, weights="regs")
    for out in ring:
        for k in ref:
            assert torch.equal(out[k], regs[0][k]), f"{name} {k}: a ring of two != registers"


@pytest.mark.gpu
def test_the_1b_expert_through_the_ring_is_the_register_paths_output_on_gpu(llama_1b_graph):
    g = llama_1b_graph
    base = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    ir = apply_edits(base, expert_edits(base))
    model, inputs = ZOO["llama-1b"](seed=1, device="cuda")
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    mk, ring = built_runs(ir.plan(), params, feeds, impls=ir.impls, weights="smem")
    assert mk.table.ws_stages == WS_MAX_STAGES
    _, regs = built_runs(ir.plan(), params, feeds, 1, impls=ir.impls, weights="regs")
    for out in ring:
        for k in out:
            assert torch.isfinite(out[k].float()).all(), k
            assert torch.equal(out[k], regs[0][k]), k


def test_a_task_stream_left_in_global_memory_compiles(llama_1b_graph):
    base = make_ir(llama_1b_graph, num_sms=132)
    src, table = emit_cuda(apply_edits(base, expert_edits(base)).plan(), stream="global")
    assert not table.qs_in_smem and "#define QS_SMEM 0" in src and table.ws_stages == WS_MAX_STAGES
    assert compile_cuda(src, "llama-1b-global-stream.cu", arch="sm_90")[:4] == b"\x7fELF"
    with pytest.raises(CodegenError, match="stream 'l2' is not one of smem, global"):
        emit_cuda(base.plan(), stream="l2")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama-tiny", "llama-1b"])
def test_the_task_stream_from_global_memory_computes_the_same_step_on_gpu(name, llama_1b_graph):
    """What the kernel reads per task is the same words from memory or from shared memory."""
    from megakernel_gym.compiler.runtime import Megakernel
    dev = "cuda" if name == "llama-1b" else "cpu"
    model, inputs = ZOO[name](seed=2, device=dev)
    g = llama_1b_graph if name == "llama-1b" else capture(model, inputs, name)
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    base = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 8)
    ir = apply_edits(base, expert_edits(base))
    outs = {}
    for stream in ("global", "smem"):
        mk = Megakernel(ir.plan(), impls=ir.impls, stream=stream)
        assert mk.table.qs_in_smem == (stream == "smem")
        outs[stream] = poisoned_runs(mk, params, feeds, 1)[0]
    for k, v in outs["smem"].items():
        assert torch.isfinite(v.float()).all(), k
        assert torch.equal(outs["global"][k], v), f"{name} {k}: task stream in memory != in shared memory"


def test_probes_are_a_trace_row_per_task_and_leave_the_kernel_otherwise_alone(graphs):
    """The probe diagnostic: with probes the kernel writes PROBE_WORDS trace words per task at the
    same points of every body (input on chip, first stage or scores, last row); without, the
    macro is empty and the trace keeps its two words per task."""
    from megakernel_gym.compiler.codegen import PROBE_NAMES, PROBE_WORDS
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    src, table = emit_cuda(plan, probes=True)
    assert table.trace_words == PROBE_WORDS == 2 + len(PROBE_NAMES) and "#define MK_PROBES 1" in src
    bodies = [b.split("\n}\n", 1)[0] for b in src.split("__device__ __forceinline__ void op_")[1:]]
    ring = [b for b in bodies if "ws_wait(g)" in b]
    attention = [b for b in bodies if "sc[g *" in b]
    assert ring and attention
    for b in ring + attention:
        assert "MK_PROBE(PROBE_INPUT)" in b and "MK_PROBE(PROBE_FIRST)" in b and "MK_PROBE(PROBE_LAST)" in b
    assert compile_cuda(src, "llama-tiny-probes.cu", arch="sm_90")[:4] == b"\x7fELF"
    plain, t2 = emit_cuda(plan)
    assert t2.trace_words == 2 and "#define MK_PROBES 0" in plain
    assert plain.replace("#define MK_PROBES 0", "#define MK_PROBES 1") == src


@pytest.mark.gpu
def test_probes_come_back_in_order_within_each_task_on_gpu():
    from megakernel_gym.compiler.runtime import Megakernel
    g, params, feeds, ref = seeded_step("llama-tiny", 0)
    base = make_ir(g, num_sms=8)
    ir = apply_edits(base, expert_edits(base))
    mk = Megakernel(ir.plan(), impls=ir.impls, probes=True)
    launch = mk.bind(params, feeds, trace=True)
    launch()
    launch.check()
    for k, v in ref.items():
        torch.testing.assert_close(launch.outputs()[k].cpu().float(), v.float(), atol=1e-4, rtol=1e-4)
    probes = launch.task_probes()
    assert len(probes) == len(ir.plan().tg.tasks)
    ring_tasks = 0
    for p in probes:
        assert p["dequeued"] == 0 and p["dequeued"] <= p["started"] <= p["signalled"], p
        seen = [p[k] for k in ("started", "input", "first", "last", "signalled") if k in p]
        assert seen == sorted(seen), p
        ring_tasks += "first" in p
    assert ring_tasks > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama-tiny", "mlp-tiny"])
def test_polling_and_signalling_from_warp_1_computes_the_same_step_on_gpu(name):
    from megakernel_gym.compiler.runtime import Megakernel
    g, params, feeds, ref = seeded_step(name, 1)
    base = make_ir(g, num_sms=8)
    ir = apply_edits(base, expert_edits(base))
    outs = [poisoned_runs(Megakernel(ir.plan(), impls=ir.impls, control_warp=w), params, feeds, 2) for w in (0, 1)]
    for run in outs[1]:
        for k, v in run.items():
            assert torch.equal(v, outs[0][0][k]), f"{name} {k}: control_warp=1 changed the output"


@pytest.mark.gpu
@pytest.mark.parametrize("name", TINY)
def test_a_producer_warp_computes_what_thread_0_does_bit_for_bit_on_gpu(name):
    for seed in (0, 1, 2):
        g, params, feeds, ref = seeded_step(name, seed)
        base = make_ir(g, num_sms=8)
        for edits in ("default", "tuned", "expert"):
            ir = apply_edits(base, {"default": "", "tuned": tuned_edits(base), "expert": expert_edits(base)}[edits])
            assert_builds_agree(ir.plan(), params, feeds, ref, {"impls": ir.impls, "producer": "warp"},
                                {"impls": ir.impls, "producer": "thread"}, 2, f"{name} seed {seed} {edits}")


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3])
def test_a_producer_warp_with_a_short_ring_computes_the_same_step_on_gpu(stages):
    g, params, feeds, ref = seeded_step("llama-tiny", 1)
    base = make_ir(g, num_sms=8)
    ir = apply_edits(base, expert_edits(base))
    mk, warp = built_runs(ir.plan(), params, feeds, 2, impls=ir.impls, producer="warp", ring_stages=stages)
    assert mk.table.ws_stages == stages
    _, thread = built_runs(ir.plan(), params, feeds, 1, impls=ir.impls, producer="thread")
    for out in warp:
        for k in ref:
            assert torch.equal(out[k], thread[0][k]), k


@pytest.mark.gpu
def test_the_1b_expert_fed_by_thread_0_is_the_producer_warps_output_on_gpu():
    assert_1b_expert_same_bits(3, producer="thread")


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{"signal": "release"}, {"hold": 1}, {"hold": 2}, {"producer": "thread", "signal": "release"}])
@pytest.mark.parametrize("name", ["llama-tiny", "attention-tiny"])
def test_the_signal_and_held_stages_compute_the_same_step_on_gpu(name, knobs):
    g, params, feeds, ref = seeded_step(name, 2)
    base = make_ir(g, num_sms=8)
    ir = apply_edits(base, expert_edits(base))
    assert_builds_agree(ir.plan(), params, feeds, ref, {"impls": ir.impls, **knobs}, {"impls": ir.impls}, 2, name)


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [{"signal": "release"}, {"hold": 1}])
def test_the_1b_expert_with_a_release_signal_or_one_held_stage_is_the_defaults_output_on_gpu(knobs):
    assert_1b_expert_same_bits(4, **knobs)
