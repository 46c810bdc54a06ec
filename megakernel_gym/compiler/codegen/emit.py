"""The emit steps: emit_cuda checks its knobs (Build) and falls back where a plan cannot take them;
_emit_once lays out the tables, writes each op's device function once and fills the templates.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field, replace

from megakernel_gym.compiler.hops import HOPS, kept_waits, ll_tensors
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import task_boxes
from megakernel_gym.compiler.codegen.emitter import _Emitter
from megakernel_gym.compiler.codegen.impl import _check_impl_names, _impl_preamble
from megakernel_gym.compiler.codegen.knobs import Build, COMBINES, CONTROL_WARP, CodegenError, INFLIGHT, KV_PREFETCHES, KV_PRE_MAX, MAXNREG, MAXNREGS, MAX_AHEAD, MAX_INFLIGHT, MK_CLAIMED, MK_CLAIM_AGAIN, PREFETCH_CHUNK, PRODUCERS, RING_L2, RING_L2_DEFAULT, SIGNALS, SMEM_BLOCK, STEP_INPUTS, THREADS, V_PREFETCHES, WARPS, WEIGHT_PATHS, WS_L2_AHEAD, WS_MAX_STAGES, WS_SEG, WS_STAGE, X_BF16, parse_hold_ops, parse_l2_idle
from megakernel_gym.compiler.codegen.layout import TaskTable
from megakernel_gym.compiler.codegen.templates import PROBE_WORDS, _CLAIM_LOOP, _L2_WAIT, _MAIN, _NO_RING, _PREFETCH, _PRELUDE, _PROBES, _RING, _RING_INIT, _THREADS


def _claim_pools(plan: Plan, em: "_Emitter", ops: dict, call_start, call_names, call_lo, call_hi, signal_start,
                 ll, split: int = 1) -> dict[str, tuple[int, int, int]]:
    """op -> (its pool's tiles, its tasks, rows a tile) for each op the emitter claims (emit_cuda
    claim; `split`: pool tiles a planned tile), after checking
    that any of its tasks may compute any of its tiles: one ring-fed call a task, tiles of one size
    that cover the op, no split parts, no counter it signals (its readers poll LL words), and no
    input a tile reads that is written in the kernel without being LL words (whoever computes the
    tile polls what it reads)."""
    out: dict[str, tuple[int, int]] = {}
    written = {em.base[o.outputs[0]] for o in plan.tg.graph.ops if o.kind != "view"}
    for name in sorted(em.claim_ops):
        op = ops[name]

        def bad(why: str) -> CodegenError:
            return CodegenError(f"claim: {name} cannot take its tiles from a pool: {why}")
        ids = plan.tg.by_op[name]
        if em.producer != "warp":
            raise bad("the weight ring's producer warp takes the tiles (producer='warp', weights='smem', no l2_wait)")
        out_base = em.base[op.outputs[0]]
        if out_base not in ll and any(r.tensor == out_base for task in plan.tg.tasks for r in task.reads):
            raise bad("its output is not LL words (hops='ll'), so a reader could not tell a tile is done")
        feeds = [p.name for p in em.epilogues.get(name, ())] or [name]
        if not all(f in em.bulk_ops for f in feeds):
            raise bad("its weights are not streamed through the weight ring")
        sizes = set()
        for t in ids:
            task = plan.tg.tasks[t]
            c0, c1 = call_start[t], call_start[t + 1]
            if c1 - c0 != 1 or call_names[c0] != name or task.parts != 1:
                raise bad(f"task {t} runs other calls or is a split part")
            if signal_start[t + 1] > signal_start[t]:
                raise bad(f"task {t} signals a counter that a reader waits on")
            sizes.add(call_hi[c0] - call_lo[c0])
        extent = plan.tg.graph.tensors[op.outputs[0]].shape[plan.tg.tiling[name][0]]
        if len(sizes) != 1 or next(iter(sizes)) * len(ids) != extent:
            raise bad("its tiles are not all of one size covering the op")
        rows = next(iter(sizes))
        if rows % split:
            raise bad(f"its tiles of {rows} rows do not split into {split} tiles of whole rows (claim_split)")
        reads = [t for t in op.inputs if not any(p.outputs[0] == t for p in em.epilogues.get(name, ()))]
        for f in feeds:
            norm = em.onchip.get(f)   # a norm folded into its consumer: its output is never written
            reads = [t for t in reads if norm is None or em.base[t] != em.base[norm.outputs[0]]]
            reads += list(norm.inputs) if norm is not None else [ops[f].inputs[0]]
        for t in reads:
            if em.base[t] in written and em.base[t] not in ll:
                raise bad(f"it reads {t}, which the kernel writes as plain words; a tile computed on another SM "
                          "than planned would not wait for it")
        out[name] = (len(ids) * split, len(ids), rows // split)
    return out


def emit_cuda(plan: Plan, prefetch_mode: str = "bulk", impls: dict[str, str] | None = None,
              weights: str = "smem", stream: str = "smem", ring_stages: int = WS_MAX_STAGES,
              l2_ahead: int = WS_L2_AHEAD, l2_wait: int = 0, probes: bool = False,
              control_warp: int = CONTROL_WARP, hops: str | None = None, combine: str = "last",
              producer: str | None = None, signal: str = "fence", hold: int | None = None,
              kv_prefetch: str = "body", ll_poll_ns: int = 0, hold_ops=None,
              step_inputs: str = "body", kv_pre: int = 0, claim: str | None = None,
              claim_split: int = 1, l2_idle=None, inflight: int | None = None,
              inflight_ops=None, x_bf16: bool = X_BF16, ring_l2: str = RING_L2_DEFAULT,
              v_prefetch: str = "none", inflight_ahead: int = 0, distinct_ops: str = "",
              maxnreg: int = MAXNREG) -> tuple[str, TaskTable]:
    """The megakernel's CUDA C source and its task table, for a plan the validator accepted.
    `impls` (op -> task body, the IR's `impl` edits) replace those ops' generated bodies.
    `weights`: how streamed matmuls get their weights: "smem" (the weight ring, bulk copies into
    shared memory issued ahead of each task) or "regs" (16-byte loads straight into registers).
    A plan with impls, whose bodies are promised SMEM_LIMIT bytes, or one whose ops leave no room
    for two ring stages, takes "regs". `stream`: where the kernel reads each queue's task stream,
    "smem" (copied into shared memory at launch, where it fits) or "global" (memory, every time).
    `ring_stages`: the most weight-ring stages per SM (fewer where the ops' shared memory leaves
    less room); `l2_ahead`: stages past the ring that the producer prefetches to L2; `l2_wait`: the
    same, only when a task must wait for its inputs. `probes`: a diagnostic trace row per task
    (PROBE_WORDS words, PROBE_NAMES; Launch.task_probes reads it), otherwise the same kernel.
    `control_warp`: the warp that polls a task's counters and whose first lane signals its own
    (0 is also the warp whose thread 0 issues the weight ring's bulk copies). `hops`: how a task
    learns its inputs are there (hops.py): "counters" (every dependency through the plan's
    counters) or "ll" (the activations that can be are LL words, which carry the launch's epoch,
    and the waits they make redundant go); None: "ll" with the producer warp, "counters" with
    thread 0 (the weights="regs" path included). On the 1B expert on an H100, "ll" measured 6% slower
    than counters with thread 0 (1,301 against 1,225 us) and 4.5% faster with the producer warp
    (1,117 against 1,167 us, bit-identical; bench/results/ab_knobs_kv_fused.json): the signal's
    fence, which LL words do without, waits for the ring's bulk copies in flight. `combine`: who
    combines a split attention's parts (COMBINES): "last", the last part to finish, into the op's
    output; "reader", every task that stages the output as a streamed matmul's input, from the
    parts' partials, where every reader is one (_Emitter.reader_combined). Bit-identical; on the 1B
    expert on an H100 the two measured the same (attention ends ~0.9 us sooner a layer, o_proj's
    tasks take ~1.5 us longer to stage their input), so "last" stays the default. A third, the
    last part from partials written as LL words with no fences, measured 981.4 against 977.7 us
    (bench/results/ab_knobs_s22.json) and was dropped (session 23). `producer`: who
    issues the weight ring's copies (PRODUCERS): "thread", thread 0 between a call's stages (the
    block syncs at every stage), or "warp", a warp of its own (the block gets THREADS + 32 threads)
    that refills each stage as soon as every compute warp has released it, and sends the
    `l2_ahead` stages past the ring to L2 before it waits for a buffer; None: "warp", or "thread"
    where l2_wait (thread 0's prefetch) is set. With the warp the 1B
    expert measured 1,193 against 1,229 us on an H100, bit-identical
    (bench/results/ab_knobs_producer_h100.json). `hold`: with the producer warp, how many of a
    call's last stages wait for the task's signal before they are refilled (1 to the ring's
    stages less one; None: all but one). The signal's fence waits for the block's bulk copies in
    flight, so each stage held keeps one out of its way: on the 1B expert on an H100 hold 1/2/3
    measured 1,197/1,177/1,168 us, q/k/v tails 2.5 -> 0.55 us at 3
    (bench/results/ab_knobs_signal_hold.json). `kv_prefetch` (KV_PREFETCHES): when a split
    attention part prefetches its slice of the KV caches to L2, at its body's start ("body") or
    before its waits ("wait"); on the 1B expert on an H100 "wait" measured 1,093 against 1,087 us
    (bench/results/ab_knobs_ring5_kvpf.json), so "body" stays; "ahead" (also before the waits of the
    task before it in the queue) 1,017.2 against 988.2 (ab_knobs_s21_kvahead.json). `ll_poll_ns`: with LL words, how long a
    thread pauses before loading again a staged vector that is not this launch's yet (0: at once;
    every block of a wave polls the same few lines of L2); on the 1B expert on an H100 0/100/400/1500
    ns measured 1,089/1,088/1,096/1,121 us (ab_knobs_ll_poll.json). `hold_ops` (parse_hold_ops):
    per op-name pattern, the stages its ring calls hold instead of `hold`; releasing the down call's
    early (so q/k/v's weights come in sooner) measured 1,100 against 1,087 us on the 1B expert on an
    H100, o_proj's and gate/up's slower too (ab_knobs_cw_hold.json, ab_knobs_hold_ops.json), so none
    is set. `step_inputs` (STEP_INPUTS): where a decode attention's fused ropes and cache writes run,
    in its own body, its q, k, v rows staged together ("body"), or as prologue calls one after
    another ("calls"); bit-identical, the 1B expert 1,068 against 1,125 us on an H100
    (ab_knobs_step_inputs.json). `kv_pre`: rows (0: off, up to KV_PRE_MAX) of its first chunk's
    cached keys and values a decode attention task copies to shared memory (cp.async) before it
    stages its inputs, where the new row it stores itself joins them, so its scores and p.V read
    shared memory after the wait; bit-identical, yet on the 1B expert on an H100 96 rows measured
    slower at every split (4 parts: 1,073 vs 1,069 us; 8: 1,078 vs 1,065, every row on chip; 16:
    1,106 vs 1,076; ab_knobs_kv_pre.json), as loading them into registers had before (and holding
    them in registers across the wait spills at the kernel's 168 registers), so it stays off.
    `claim` (a regular expression over op names) and `claim_split`: the matching ring-fed ops take
    their tiles from a pool as the SMs that run them get to them (_claim_pools, _CLAIM_LOOP): the
    producer warp claims a tile with an atomic add on the op's count in scratch (issued before it
    waits for the buffer), streams that tile's weight rows and announces the tile with its first
    stage; a stage of no bytes says the pool is empty. A task stages its input once for all the
    tiles it takes; `claim_split` cuts each planned tile into that many pool tiles. It needs
    hops="ll" (readers poll the tiles' outputs) and inputs a tile reads as LL words.
    Bit-identical, and slower on the 1B expert on an H100 at every grain, though the silu/down
    tasks' finishes spread 2-6 us a layer past a balanced finish (task_probe_cw_tasks.json):
    claimed MLP ops 1,103 us against 1,069, in halves 1,133, quarters 1,146, eighths 1,197
    (ab_knobs_claim_split.json); the expert with finer planned tiles gained from claims only where
    the finer tiles had cost more than that (ab_knobs_claim.json, the first version, which claimed
    after the buffer wait: 16-row gate/up tiles 1,145 -> 1,125 us, the expert's own 1,068 ->
    1,096). lm_head, whose SMs finish its stream 16.5 us apart (task_probe_s23.json), lost too:
    768-row tiles (every SM has one) cut into 24 / 48 pool tiles measured 1,023.9 / 1,017.8 us
    against 1,016.2 unclaimed and the expert's 976.7 (ab_knobs_s23_lm_claim.json). So it stays off.
    The producer warp's `l2_ahead`
    measured 1,087 us at 0, 1,433 at 2 and 1,573-1,609 at 4-16 (ab_knobs_l2_ahead_warp.json), as
    thread 0's had: a weight stage sent to L2 ahead of its bulk copy costs more than it saves.
    `l2_idle` (parse_l2_idle): per op-name pattern, the stages of its ring calls past the ring that
    the producer warp sends to L2 (in 4 KB pieces) when it finds the ring full and landed, its oldest
    stage unreleased and also a marked call's (ws_idle_l2): only while a task waits for its inputs.
    Alone (bench/l2_probe.py, l2_probe.json) 64 KB per SM sent during an 8 us wait cut a 512 KB run's
    span from 24.3 to 21.8 us. In the 1B expert on an H100 (alternating rounds, bit-identical): the
    first version, which did not ask whose the oldest stage was, gave gate/up's (mlp.silu_mul) 2 / 4 /
    8 stages 1,063.5 / 1,080 / 1,138 us against 1,068.4 (ab_knobs_l2_idle.json); this one, every
    ring call at 1 / 2 / 3 / 4 stages, 1,069.4 / 1,055.1-1,055.9 / 1,067.4 / 1,080.4 against 1,069
    (ab_knobs_l2_idle_own.json, ab_knobs_l2_idle_all.json; the gain at 2 is the MLP's: gate/up's
    input 3.4 -> 2.4 us, its rows 16.5 -> 15.2, task_probe_l2_idle.json), while the gate/up calls
    alone lost (1,095-1,098). Over the level-5 families ".:2" ranged from 1.7% faster (Qwen3-1.7B)
    to 10.5% slower (Qwen2-0.5B; bench/families_knobs.py, families_knobs.json): the extra reads
    also slow the latency chains they overlap. So it stays off. `inflight`: the most ring stages the
    producer warp keeps issued and not landed (None: INFLIGHT, 2, with the producer warp). A poll or
    signal waits behind the chip's copies in flight: with every SM streaming through 5 stages a word
    one SM wrote took 7.7 us to be seen by another, 1.8 / 1.0 / 0.26 us with 3 / 2 / 1 in flight, at
    3.1 / 3.1 / 2.8 TB/s (bench/poll_probe.py, poll_probe.json). The ring still fills all its stages
    while a task waits; only how many are on their way at once is capped. On the 1B expert on an H100
    (bit-identical) 1 / 2 / 3 measured 1,029.5 / 1,030.7 / 1,054.9 us against 1,067.7 with no cap
    (ab_knobs_inflight.json); with o_proj in 64 tasks 1,061 / 1,020.5, split 8 1,022 / 1,023
    (ab_knobs_inflight_combos.json, where holding 2 stages, l2_idle and kv_pre lost). `inflight_ops`
    (parse_hold_ops's form, 1 to 16): per op-name pattern, a ring call's own cap instead of
    `inflight` (while the producer issues that call's stages), e.g. fewer in flight during the
    attention half's latency chain and more through the MLP. On the 1B expert on an H100 'attn:1'
    measured 994.5-998.6 us against 1,020-1,024 (q/k/v alone 1,025.6 and o_proj alone 1,009.1 with
    6 stages and 5; 'attn:1;mlp:3' 1,015.2; bench/results/ab_knobs_s20_*.json); a schedule says the
    same per matmul with the IR's `inflight` edit (Knobs.inflight), which the expert now uses, and
    a pattern here comes first where both name a call. `inflight_ahead` (0: off, else 1 to 16): the
    most stages in flight for a ring call whose task's input is not yet on chip (the ring filling
    for a task still waiting for its inputs, or one further on), instead of the call's own cap; once the
    task's input is on chip its stages go at their own cap: each such task's calls word carries where
    its ring segments end in its queue's stream in its high half, which the control warp stores in
    ws_open once the task's counters are full and its matmul has staged its input vector (MK_OPEN;
    with LL words a task polls its input there, not at its counters), or at the task's end. The aim: during the
    attention half almost every SM fills its ring for o_proj and gate/up while it waits, at 2 in
    flight, and every dependency poll of the chain waits behind those copies; at 1 they waited
    0.26 us against 1.0 in bench/poll_probe.py, a chip-wide effect (with half the SMs streaming, a
    poller on a streaming SM and one on an idle SM waited 1.5 and 1.3 us). Streamed at the full cap
    only once its task runs, a call still fills the ring while it waits, one copy at a time.
    Predicted on the 1B expert: each of the attention half's 4-5 hops 0.5-0.75 us shorter, less
    about 10% of what the waiting rings prefetch, 977 -> 945-965 us. Measured (H100, bit-identical,
    bench/results/ab_knobs_s23_ahead.json): 987.7 against 976.5, and the `ahead` edit lost too (gate/up
    at 1: 981.5; every matmul at 1: 987.1); without the expert's `inflight` edits it wins back what
    they give (1,007.0 -> 980.8), no more. The waiting rings' prefetch is worth more than the faster
    polls, so it stays off. Above the call's cap it lost as well: q/k/v at 2 / 3 in flight while
    they wait (1 once running) measured 985.6 / 994.3 us against 976.9, and 991.1 / 1,008.4 with
    down's held stages released (hold_ops on mlp.add at 0; ab_knobs_s23_qkv_ahead.json): the copies
    added during down's tail delay the polls from down to q/k/v more than the earlier weights
    save. The IR's `ahead OP n=N` edit
    (Knobs.ahead, 1-7) gives a matmul's calls a cap of their own for that, in bits 21-23 of their
    rows word, which comes first. `x_bf16` (X_BF16): a decode bf16 ring
    matmul keeps its input vector in shared memory as bf16 and reads it with each weight vector
    (_Emitter._x_half; the same bits): the 1B expert's largest op scratch (down_proj's 8192 values)
    halves, 205.8 -> 189.4 KB a block, and it measured 987.5 against 992.8 us on an H100
    (ab_knobs_s20_xbf16.json); the room it leaves for a sixth ring stage measured slower
    (1,020-1,043 us: ab_knobs_s20_ring6.json, ab_knobs_s20_hold.json). `ring_l2` (RING_L2): the L2
    eviction priority of the ring's bulk copies, "evict_first" (RING_L2_DEFAULT) or "normal". A weight
    is read once a step, and with normal priority its lines pushed out what the latency chain reads
    again: a split attention part's KV slice, prefetched to L2 as its task starts, was still in L2
    when an early part loaded its keys 8 us later, but not for the parts that started late (behind
    a q/k/v task on the same SM), whose key loads took 2.4-2.9 us against 1.0 (task_probe_s20.json's
    dump). Evict-first, the same bits: the 1B expert 977.1 / 976.8 / 977.0 us against 987.8 / 988.9
    / 986.8 with "normal" in three alternating-round runs (ab_knobs_s21_evict*.json,
    ab_knobs_s21_sweep.json), the attention's chain step 9.75 -> 7.75 us a layer
    (task_probe_s21_evict.json); every level-5 family faster, 0.4% (SmolLM2) to 14.6% (Qwen2-1.5B
    at batch 4, 4,173 -> 3,642 us) (families_s21_evict.json). On top of it these still lost:
    kv_prefetch "ahead" (996.8), l2_idle (984-985), a sixth stage (1,024.8), kv_pre=64 (984.9),
    combine "reader" (995.4); q/k/v at 2 in flight, hold_ops on down and ll_poll_ns=100 within 1 us.
    `v_prefetch` (V_PREFETCHES): "l1" sends each of a decode attention's value rows to L1 with its
    key row's loads, so p.V's round trip overlaps the scores; the same bits and the same time on
    the 1B expert (976.8 against 976.8 us: ab_knobs_s21_evict2.json), so "none" stays. `signal` (SIGNALS): how a task publishes its writes
    before its counters' adds: "fence" (fence.acq_rel.gpu, then relaxed adds) or "release" (each
    add a release); they measured the same. `distinct_ops` (a regular expression; "": none): a probe of
    the kernel's instruction footprint, not a schedule's knob. Each op whose name it matches gets a
    function of its own where it would share one with ops whose bodies are the same text (the layers of
    a model), so the kernel's code grows with the same schedule, waits and bits. `maxnreg` (0 or one of
    MAXNREGS): the compute warps' registers. With the producer warp the block has 288 threads, three
    warps share one of the SM's four register files and ptxas caps the kernel at 168; one-off op bodies
    (one layer's attention split, or with a cache write fused in) then spill, and every task slows
    (GPT-2's searched climb 6: 52 bytes, 4.8% on an H200; bench/sim_spills.py). With maxnreg the
    producer's warp comes with a whole warpgroup (384 threads) that gives its registers back, and the
    compute warps take maxnreg (setmaxnreg, sm_90a: runtime.megakernel_arch). The same bits; the
    experts within 0.45% (ab_knobs_maxnreg_*.json). The default (MAXNREG) is 216; 0 keeps ptxas's cap."""
    impls = impls or {}
    ring, regs = _builds(impls, prefetch_mode=prefetch_mode, weights=weights, stream=stream,
                         ring_stages=ring_stages, l2_ahead=l2_ahead, l2_wait=l2_wait, probes=probes, control_warp=control_warp, hops=hops, combine=combine,
                         producer=producer, signal=signal, hold=hold, kv_prefetch=kv_prefetch,
                         ll_poll_ns=ll_poll_ns, hold_ops=hold_ops, step_inputs=step_inputs, kv_pre=kv_pre,
                         claim=claim, claim_split=claim_split, l2_idle=l2_idle, inflight=inflight,
                         inflight_ops=inflight_ops, x_bf16=x_bf16, ring_l2=ring_l2, v_prefetch=v_prefetch,
                         inflight_ahead=inflight_ahead, distinct_ops=distinct_ops, maxnreg=maxnreg)
    if ring is not None:
        source, table = _emit(plan, impls, ring)
        if table.ws_stages >= 2:
            return source, table
    # no room for a ring of 2 stages, or impls: weights loaded to registers, thread 0's stream, the ring's knobs off
    return _emit(plan, impls, regs)


def _builds(impls: dict[str, str], *,
           prefetch_mode, weights, stream, ring_stages, l2_ahead, l2_wait, probes, control_warp, hops, combine,
           producer, signal, hold, kv_prefetch, ll_poll_ns, hold_ops, step_inputs, kv_pre, claim, claim_split,
           l2_idle, inflight, inflight_ops, x_bf16, ring_l2, v_prefetch, inflight_ahead, distinct_ops, maxnreg) -> tuple["Build | None", "Build"]:
    """emit_cuda's first step: its knobs checked (CodegenError names a bad one and what it takes), as
    the weight ring's Build (None where the plan carries impls or weights="regs") and the fallback's
    (weights in registers, thread 0's stream, the ring's knobs off)."""
    try:
        re.compile(distinct_ops)
    except (re.error, TypeError) as e:
        raise CodegenError(f"distinct_ops {distinct_ops!r} is not a regular expression: {e}") from None
    if impls:
        from megakernel_gym.compiler.impl_guard import impl_size_problem
        problem = impl_size_problem(impls)
        if problem:
            raise CodegenError(problem)
    if producer is None:
        producer = "thread" if l2_wait else "warp"
    regs_hops = hops or "counters"          # the weights="regs" path has no producer warp
    if hops is None:
        hops = "ll" if producer == "warp" else "counters"
    if signal not in SIGNALS:
        raise CodegenError(f"signal {signal!r} is not one of {', '.join(SIGNALS)}")
    if kv_prefetch not in KV_PREFETCHES:
        raise CodegenError(f"kv_prefetch {kv_prefetch!r} is not one of {', '.join(KV_PREFETCHES)}")
    if ring_l2 not in RING_L2:
        raise CodegenError(f"ring_l2 {ring_l2!r} is not one of {', '.join(RING_L2)}")
    if v_prefetch not in V_PREFETCHES:
        raise CodegenError(f"v_prefetch {v_prefetch!r} is not one of {', '.join(V_PREFETCHES)}")
    if not (isinstance(ll_poll_ns, int) and 0 <= ll_poll_ns <= 100_000):
        raise CodegenError(f"ll_poll_ns={ll_poll_ns!r}: the pause between polls is 0-100000 ns")
    if hold is None:
        hold = 15          # all but one of the ring's stages (clamped where the ring is sized)
    if not 1 <= hold <= 15:
        raise CodegenError(f"hold={hold}: a call holds 1 to 15 of its last stages (fewer than the ring has)")
    hold_ops = parse_hold_ops(hold_ops)
    l2_idle = parse_l2_idle(l2_idle)
    if inflight is None:   # 2 with the producer warp (INFLIGHT), no cap otherwise
        inflight = INFLIGHT if producer == "warp" else 16
    if not (isinstance(inflight, int) and 1 <= inflight <= MAX_INFLIGHT):
        raise CodegenError(f"inflight={inflight!r}: the producer warp keeps 1 to {MAX_INFLIGHT} ring stages in flight")
    if inflight < 16 and producer != "warp":
        raise CodegenError("inflight caps the producer warp's copies in flight: it takes producer='warp'")
    inflight_ops = parse_hold_ops(inflight_ops, "inflight_ops", 1, MAX_INFLIGHT, "a call keeps")
    if inflight_ops and (producer != "warp" or claim is not None or weights != "smem"):
        raise CodegenError("inflight_ops caps the producer warp's copies per op: it takes producer='warp', "
                           "weights='smem' and no claim")
    if l2_idle and (producer != "warp" or claim is not None or weights != "smem"):
        raise CodegenError("l2_idle is the producer warp's: it takes producer='warp', weights='smem' and no claim")
    if isinstance(inflight_ahead, bool) or not (isinstance(inflight_ahead, int) and 0 <= inflight_ahead <= MAX_INFLIGHT):
        raise CodegenError(f"inflight_ahead={inflight_ahead!r}: a call whose task has not started keeps 1 to "
                           f"{MAX_INFLIGHT} ring stages in flight (0: its own cap, always)")
    if inflight_ahead and (producer != "warp" or claim is not None or weights != "smem" or impls):
        raise CodegenError("inflight_ahead caps the producer warp's copies for tasks not yet started: it takes "
                           "producer='warp', weights='smem', no claim and no impls")
    if claim is not None:
        try:
            re.compile(claim)
        except re.error as e:
            raise CodegenError(f"claim={claim!r} is not a regular expression over op names ({e})") from None
        if not (isinstance(claim_split, int) and 1 <= claim_split <= 64):
            raise CodegenError(f"claim_split={claim_split!r}: a planned tile splits into 1 to 64 pool tiles")
        if l2_ahead or l2_wait or weights != "smem" or impls:
            raise CodegenError("claim takes tiles through the producer warp's weight ring: it needs weights='smem', "
                               "no impls and no L2 lookahead (l2_ahead=0, l2_wait=0)")
    if not (isinstance(kv_pre, int) and 0 <= kv_pre <= KV_PRE_MAX):
        raise CodegenError(f"kv_pre={kv_pre!r}: a decode attention copies 0 (off) to {KV_PRE_MAX} key and value rows "
                           "to shared memory before its wait")
    if step_inputs not in STEP_INPUTS:
        raise CodegenError(f"step_inputs {step_inputs!r} is not one of {', '.join(STEP_INPUTS)}")
    if producer not in PRODUCERS:
        raise CodegenError(f"producer {producer!r} is not one of {', '.join(PRODUCERS)}")
    if maxnreg and maxnreg not in MAXNREGS:
        raise CodegenError(f"maxnreg={maxnreg!r}: the compute warps take 0 (ptxas's 168) or one of "
                           f"{', '.join(map(str, MAXNREGS))} registers (the producer's warpgroup keeps 504 less twice that)")
    if producer == "warp" and l2_wait:
        raise CodegenError("l2_wait is thread 0's prefetch: it takes producer='thread'")
    if combine not in COMBINES:
        raise CodegenError(f"combine {combine!r} is not one of {', '.join(COMBINES)}")
    if hops not in HOPS:
        raise CodegenError(f"hops {hops!r} is not one of {', '.join(HOPS)}")
    if not 0 <= control_warp < WARPS:
        raise CodegenError(f"control_warp={control_warp}: a block has warps 0-{WARPS - 1}")
    if not (2 <= ring_stages <= 16 and 0 <= l2_ahead <= 64 and 0 <= l2_wait <= 64):
        raise CodegenError(f"ring_stages={ring_stages}, l2_ahead={l2_ahead}, l2_wait={l2_wait}: the ring takes "
                           "2-16 stages and the L2 lookaheads 0-64")
    if prefetch_mode not in _PREFETCH:
        raise CodegenError(f"prefetch mode {prefetch_mode!r} is not one of {', '.join(_PREFETCH)}")
    if weights not in WEIGHT_PATHS:
        raise CodegenError(f"weights {weights!r} is not one of {', '.join(WEIGHT_PATHS)}")
    if stream not in ("smem", "global"):
        raise CodegenError(f"stream {stream!r} is not one of smem, global")
    ring = None
    if weights == "smem" and not impls:
        ring = Build(prefetch_mode=prefetch_mode, weights=weights, stream=stream, ring_stages=ring_stages,
                     l2_ahead=l2_ahead, l2_wait=l2_wait, probes=probes, control_warp=control_warp, hops=hops,
                     combine=combine, producer=producer, signal=signal, hold=hold, kv_prefetch=kv_prefetch,
                     ll_poll_ns=ll_poll_ns, hold_ops=hold_ops, step_inputs=step_inputs, kv_pre=kv_pre, claim=claim,
                     claim_split=claim_split, l2_idle=l2_idle, inflight=inflight, inflight_ops=inflight_ops,
                     x_bf16=bool(x_bf16), ring_l2=ring_l2, v_prefetch=v_prefetch, inflight_ahead=inflight_ahead,
                     distinct_ops=distinct_ops, maxnreg=maxnreg)
    return ring, Build(prefetch_mode, "regs", stream, probes=probes, control_warp=control_warp, hops=regs_hops,
                       combine=combine, producer="thread", signal=signal, kv_prefetch=kv_prefetch,
                       ll_poll_ns=ll_poll_ns, step_inputs=step_inputs, kv_pre=kv_pre, v_prefetch=v_prefetch,
                       distinct_ops=distinct_ops)


def _emit(plan: Plan, impls: dict[str, str], b: "Build") -> tuple[str, TaskTable]:
    """_emit_once, then with hops="ll" once more with the LL tensors that emission shows (an
    impl body reaches its tensors by raw pointer: a plan with impls keeps counters throughout)."""
    if b.claim and (b.hops != "ll" or impls):
        raise CodegenError("claim: a claimed op's readers must poll its output, so it needs hops='ll' and no impls")
    # the first pass only shows which tensors can be LL words: no claims
    source, table, em = _emit_once(plan, impls, replace(b, claim=None, claim_split=1))
    if b.hops == "ll" and not impls:
        ll = ll_tensors(plan, em.access, em.base, em.called)
        if ll or b.claim:
            source, table, _ = _emit_once(plan, impls, b, ll=ll)
    return source, table


def _emitter(plan: Plan, impls: dict[str, str], b: "Build", ll: frozenset[str]) -> "_Emitter":
    """The emitter of build `b` of the plan."""
    return _Emitter(plan, impls, b.weights, ll, b.combine, b.producer if b.weights == "smem" else "thread",
                    b.kv_prefetch, b.hold_ops, b.step_inputs, b.kv_pre, b.claim, b.x_bf16, b.v_prefetch)


def epilogue_ops(plan: Plan) -> frozenset[str]:
    """The ops whose fused matmuls emit_cuda (its defaults, no impls) runs as a real epilogue, in one
    call with the op (epilogue_producers); any other task runs each fused matmul as a call of its own
    that stores its rows, which the task's body then reads back (costmodel._call_trips prices that).
    The ring's build, as function_calls counts it: where emit_cuda falls back to weights in registers
    for want of shared memory, it makes no epilogues."""
    em = _emitter(plan, {}, Build(), frozenset())
    ops = {o.name: o for o in plan.tg.graph.ops}
    return frozenset(name for name, ids in plan.tg.by_op.items() if ids and em.epilogue_producers(ops[name]))


def _op_functions(plan: Plan, impls: dict[str, str], b: "Build", ll: frozenset[str],
                  prologue_names, epilogues: dict | None = None) -> tuple["_Emitter", list, dict, dict, dict, dict]:
    """The device functions a build of the plan emits: (the emitter, the ops whose bodies are
    emitted in order, {(body, pre-wait body, own): id}, op -> id, op -> its slots, id -> its ops).
    Ops whose bodies read alike (the same projection in every layer) share one function.
    `prologue_names(em)` gives the names of every op that runs as a prologue call in some task;
    `epilogues`: the emitter's epilogues of an earlier pass over the plan (they do not depend on
    the LL tensors), else found."""
    em = _emitter(plan, impls, b, ll)
    g = plan.tg.graph
    ops = {o.name: o for o in g.ops}
    used = [name for name, ids in plan.tg.by_op.items() if ids]   # fused producers: where a task calls them
    # elementwise ops whose fused producers are ring-fed matmuls run them as a real epilogue: one call
    if epilogues is not None:
        em.epilogues = dict(epilogues)
    else:
        for name, ids in plan.tg.by_op.items():
            prods = em.epilogue_producers(ops[name]) if ids and name not in impls else None
            if prods and not any(p.name in impls for p in prods):
                em.epilogues[name] = prods
    ahead = dict(plan.knobs.ahead) if plan.knobs else {}
    em.open_ops = None if b.inflight_ahead else frozenset(
        name for name in ops if name in ahead or any(p.name in ahead for p in em.epilogues.get(name, ())))
    called = prologue_names(em)
    em.called = set(called)
    for pname in called:
        if pname not in used:
            used.append(pname)
    bodies: dict[tuple, int] = {}
    op_ids, op_slots, users = {}, {}, {}
    unknown = [n for n in impls if n not in ops]
    if unknown:
        raise CodegenError(f"impl for {unknown[0]!r}: the plan has no op of that name")
    for name in used:
        em.prewait = ""
        body, slot_list = em.impl_body(ops[name], impls[name]) if name in impls else em.op_body(ops[name])
        # (distinct_ops: a function of its own, its name beside its text)
        own = name if b.distinct_ops and re.search(b.distinct_ops, name) else ""
        fid = bodies.setdefault((body, em.prewait, own), len(bodies))
        op_ids[name], op_slots[name] = fid, slot_list
        users.setdefault(fid, []).append(name)
    return em, used, bodies, op_ids, op_slots, users


def function_calls(plan: Plan, distinct_ops: str = "") -> dict[str, tuple[int, ...]]:
    """Per op with tasks, the ids of the device functions each of its tasks calls (its prologue
    calls', then its own), as emit_cuda emits the plan with its defaults and no impls (the LL pass
    included): ops whose ids match run the same code. What the cost model prices the kernel's code
    by (costmodel.cold_code; the sim scores no plan with impls). Where emit_cuda falls back to
    weights in registers for want of shared memory, the ring's build is the one counted.
    `distinct_ops`: as emit_cuda's (a probe)."""
    return function_table(plan, distinct_ops)[0]


def function_table(plan: Plan, distinct_ops: str = "") -> tuple[dict[str, tuple[int, ...]], dict[int, int]]:
    """(function_calls, and per function id the characters of its CUDA source: its body and the part
    it runs before its waits), the size the cost model prices a function's first call by
    (costmodel.cold_code_chars)."""
    b = Build(distinct_ops=distinct_ops)      # the ring's build: weights in shared memory, the producer warp
    prologue: dict[str, list[str]] = {}

    def prologue_names(em):
        # every task of an op expands the same fused producers (tasks._lower_op follows names, not
        # boxes), so its first task's calls are every task's
        names = []
        prologue.clear()
        for op, ids in plan.tg.by_op.items():
            if ids:
                prologue[op] = [] if op in em.epilogues else [p for p, _ in em.prologue_calls(plan.tg.tasks[ids[0]])]
                names += [p for p in prologue[op] if p not in names]
        return names

    em, _, bodies, op_ids, _, _ = _op_functions(plan, {}, b, frozenset(), prologue_names)
    ll = ll_tensors(plan, em.access, em.base, em.called)
    if ll:
        _, _, bodies, op_ids, _, _ = _op_functions(plan, {}, b, ll, prologue_names, em.epilogues)
    return ({op: tuple(op_ids[p] for p in calls) + (op_ids[op],) for op, calls in prologue.items()},
            {fid: len(body) + len(prewait) for (body, prewait, _), fid in bodies.items()})


@dataclass
class _Calls:
    """The plan's calls in task order (a task's prologue calls, then its own op's): the task table's
    call arrays, with each call's op name beside them."""
    start: list[int] = field(default_factory=lambda: [0])    # per task: its first call
    op: list[int] = field(default_factory=list)              # the device function's id
    lo: list[int] = field(default_factory=list)
    hi: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)           # where its op's slots start in slot_args
    names: list[str] = field(default_factory=list)
    part: list[int] = field(default_factory=list)


def _emit_once(plan: Plan, impls: dict[str, str], b: "Build",
               ll: frozenset[str] = frozenset()) -> tuple[str, TaskTable, "_Emitter"]:
    """One emission of the plan under build `b`, its LL tensors `ll`, as named steps: the device
    functions, the call, wait/signal and prefetch tables, the claims' pools, the weight ring's
    segments, each queue's task stream, the shared memory they fit in, then the source."""
    g = plan.tg.graph
    ops = {o.name: o for o in g.ops}
    prologues: list = []

    def prologue_names(em):
        prologues[:] = [[] if t.op in em.epilogues else em.prologue_calls(t) for t in plan.tg.tasks]
        names = []
        for calls in prologues:
            for pname, _ in calls:
                if pname not in names:
                    names.append(pname)
        return names

    em, used, bodies, op_ids, op_slots, users = _op_functions(plan, impls, b, ll, prologue_names)
    functions = _function_texts(bodies, users)
    slot_args, calls = _call_table(plan, ops, used, op_ids, op_slots, prologues)
    wait_start, wait_counter, wait_target, signal_start, signal_counter = _waits_and_signals(plan, ll)
    q_start, q_task = [0], []
    for q in plan.queues:
        q_task += list(q)
        q_start.append(len(q_task))
    pf_start, pf_slot, pf_offset, pf_bytes = _prefetch_table(plan, em, ops, calls, q_start, len(q_task))
    pools = _claim_pools(plan, em, ops, calls.start, calls.names, calls.lo, calls.hi, signal_start, ll, b.claim_split)
    for name in pools:   # each pool's claim count: a word of scratch, zero at bind, that only grows
        em.scratch[name + "#claim"] = (len(em.slots) + len(em.scratch), 16)
    ring = _ring_segments(plan, em, b, ops, calls, pools)
    ws_start, ws_slot, ws_offset, ws_rows, ws_rowb, open_end, per_op, ahead_on = ring
    q_stream, qs_start = _queue_streams(plan, calls, pools, q_start, (wait_start, wait_counter, wait_target),
                                        (signal_start, signal_counter), (pf_start, pf_slot, pf_offset, pf_bytes),
                                        open_end, ahead_on)
    n_slots, n_args = len(em.slots) + len(em.scratch), max(1, len(slot_args))
    qs_smem, tab_bytes, segs, stages, ring_bytes = _shared_memory(plan, em, b, pools, n_slots, n_args, qs_start, ws_start)
    table = TaskTable(q_start, q_task, calls.start, calls.op, calls.lo, calls.hi, wait_start, wait_counter,
                      wait_target, signal_start, signal_counter, len(plan.counters), slots=dict(em.slots),
                      aliases=dict(em.base), op_ids=op_ids, call_slots=calls.slots, slot_args=slot_args,
                      pf_start=pf_start, pf_slot=pf_slot, pf_offset=pf_offset, pf_bytes=pf_bytes,
                      smem_bytes=ring_bytes + tab_bytes + em.smem, call_part=calls.part, scratch=dict(em.scratch),
                      ws_start=ws_start, ws_slot=ws_slot, ws_offset=ws_offset, ws_rows=ws_rows, ws_rowb=ws_rowb,
                      ws_stages=stages, q_stream=q_stream, qs_start=qs_start,
                      qs_in_smem=qs_smem, epilogues={e: [p.name for p in ps] for e, ps in em.epilogues.items()},
                      trace_words=PROBE_WORDS if b.probes else 2, ll=sorted(ll),
                      threads=(THREADS + (128 if b.maxnreg else 32)) if stages > 0 and em.producer == "warp" else THREADS,
                      maxnreg=b.maxnreg if stages > 0 and em.producer == "warp" else 0)
    source = _source(g, em, b, impls, bodies, op_ids, functions, pools, table, stages, segs, per_op, ahead_on,
                     qs_smem, n_slots, n_args, tab_bytes)
    if impls:
        _check_impl_names(source, impls)
    return source, table, em


def _function_texts(bodies: dict, users: dict) -> list[str]:
    """Each distinct device function's text: op_N (the task body) and, where it has work that needs no
    input of this step, pre_N."""
    return [f"// used by {len(users[fid])} op(s): {', '.join(users[fid][:4])}{' ...' if len(users[fid]) > 4 else ''}\n"
            f"__device__ __forceinline__ void op_{fid}(void* const* T, const int* __restrict__ S, int lo, int hi, "
            f"int part, float* sm) {{\n"
            f"{body.replace('MK_IMPL_FID', str(fid))}}}\n"
            + (f"// op_{fid}'s work that needs no input of this step, run before the task's waits\n"
               f"__device__ __forceinline__ void pre_{fid}(void* const* T, const int* __restrict__ S, int lo, int hi, "
               f"int part) {{\n{pre}}}\n" if pre else "")
            for (body, pre, _), fid in bodies.items()]


def _call_table(plan: Plan, ops: dict, used: list[str], op_ids: dict, op_slots: dict,
                prologues: list) -> tuple[list[int], _Calls]:
    """slot_args (each used op's slots, one after another) and the calls of every task."""
    g = plan.tg.graph
    op_slot_start, slot_args = {}, []
    for name in used:
        op_slot_start[name] = len(slot_args)
        slot_args += op_slots[name]
    c = _Calls()
    for t in plan.tg.tasks:
        for pname, pbox in prologues[t.id]:
            ax = plan.tg.tiling[pname][0]
            c.names.append(pname)
            c.op.append(op_ids[pname])
            c.slots.append(op_slot_start[pname])
            c.lo.append(pbox[ax][0])
            c.hi.append(pbox[ax][1])
            c.part.append(0)
        obox, _ = task_boxes(plan.tg, t, ops[t.op])
        ax = plan.tg.tiling[t.op][0]
        c.names.append(t.op)
        c.op.append(op_ids[t.op])
        c.slots.append(op_slot_start[t.op])
        c.lo.append(obox[ax][0])
        c.hi.append(min(obox[ax][1], g.tensors[ops[t.op].outputs[0]].shape[ax]))
        c.part.append(t.part)
        c.start.append(len(c.op))
    return slot_args, c


def _waits_and_signals(plan: Plan, ll: frozenset[str]) -> tuple[list[int], ...]:
    """Per task, the counters it waits for (and their targets) and the counters it signals. LL words
    enforce some dependencies themselves (hops.kept_waits); a counter nobody waits on any more is not
    signalled, and a task that signals nothing skips its fence."""
    n = len(plan.tg.tasks)
    waits = kept_waits(plan, ll)
    wait_start, wait_counter, wait_target = [0], [], []
    for t in range(n):
        for cid, threshold in waits.get(t, ()):
            wait_counter.append(cid)
            wait_target.append(threshold)
        wait_start.append(len(wait_counter))
    waited = set(wait_counter)
    produces: dict[int, list[int]] = {}
    for c in plan.counters:
        for p in c.producers:
            if c.id in waited:
                produces.setdefault(p, []).append(c.id)
    signal_start, signal_counter = [0], []
    for t in range(n):
        signal_counter += produces.get(t, [])
        signal_start.append(len(signal_counter))
    return wait_start, wait_counter, wait_target, signal_start, signal_counter


def _prefetch_table(plan: Plan, em: "_Emitter", ops: dict, calls: _Calls, q_start: list[int],
                    n_positions: int) -> tuple[list[int], ...]:
    """Per queue position, the (slot, offset, bytes) its warp 0 sends to L2. Prefetch depth d: a task's
    weight tiles go to L2 when its queue reaches the task d-1 places before it (d = 1: as the task starts
    waiting; deeper: while earlier tasks run). Attention tasks always prefetch their KV cache regions as
    they start waiting."""
    depth = (plan.knobs.prefetch if plan.knobs else {}) or {}
    at: dict[int, list[tuple[int, int, int]]] = {}
    for qi, q in enumerate(plan.queues):
        for j, t in enumerate(q):
            own = calls.start[t + 1] - 1
            if plan.tg.tasks[t].parts == 1:   # a split part reads a slice known only at run time: no prefetch
                at.setdefault(q_start[qi] + j, []).extend(em.cache_bytes(ops[calls.names[own]], calls.lo[own],
                                                                         calls.hi[own]))
            for c in range(calls.start[t], calls.start[t + 1]):
                for name in [p.name for p in em.epilogues.get(calls.names[c], ())] or [calls.names[c]]:
                    # a fused producer's weights follow its own depth (the consumer may read no weight)
                    d = max(depth.get(name, 0), depth.get(plan.tg.tasks[t].op, 0))
                    if d <= 0:
                        continue
                    item = em.weight_bytes(ops[name], calls.lo[c], calls.hi[c])
                    if item:
                        at.setdefault(q_start[qi] + max(0, j - (d - 1)), []).append(item)
    pf_start, pf_slot, pf_offset, pf_bytes = [0], [], [], []
    for i in range(n_positions):
        for slot, off, nb in at.get(i, ()):
            pf_slot.append(slot)
            pf_offset.append(off)
            pf_bytes.append(nb)
        pf_start.append(len(pf_slot))
    return pf_start, pf_slot, pf_offset, pf_bytes


def _ring_segments(plan: Plan, em: "_Emitter", b: "Build", ops: dict, calls: _Calls, pools: dict) -> tuple:
    """The weight ring's stream: per queue, the weight rows of its ring-fed calls in queue and call order
    (what the calls consume, stage by stage, is what ws_pump issues, stage by stage); a claimed op's call
    (its pool's index and its segment count in the rows word) names its first tile's rows, which the
    producer moves to each tile it takes. (ws_start, ws_slot, ws_offset, ws_rows, ws_rowb, open_end,
    per_op, ahead_on)."""
    pool_of = {name: i for i, name in enumerate(pools)}
    ws_start, ws_slot, ws_offset, ws_rows, ws_rowb = [0], [], [], [], []
    # the schedule's own caps (the IR's `inflight` edits, per matmul), where the producer warp streams
    # without claims; emit_cuda's inflight_ops patterns, a bench's A/B, come first
    own_caps = plan.knobs and em.producer == "warp" and b.weights == "smem" and not pools
    knob_caps = dict(plan.knobs.inflight) if own_caps else {}
    # and its caps while a matmul's task still waits (the IR's `ahead` edits), 3 bits beside them
    ahead_caps = dict(plan.knobs.ahead) if own_caps else {}
    per_op = bool(b.inflight_ops or knob_caps or ahead_caps)
    ahead_on = bool(b.inflight_ahead or ahead_caps)   # the producer tells waiting tasks' stages apart
    # per task with stages capped while it waits (an `ahead` cap, or inflight_ahead: any stage), where its
    # ring segments end in its queue's stream: the control warp stores it in ws_open as the task opens,
    # and the producer takes a stage before it for one whose task's input is on chip. A task with no such
    # stage carries 0 and touches nothing (ws_open orders only the capped tasks, which open in queue order)
    open_end = {}
    for q in plan.queues:
        for t in q:
            seg0, capped = len(ws_slot), False
            for c in range(calls.start[t], calls.start[t + 1]):
                pool = pool_of.get(calls.names[c], -1)
                rows = pools[calls.names[c]][2] if pool >= 0 else calls.hi[c] - calls.lo[c]
                feeds = [p.name for p in em.epilogues.get(calls.names[c], ())] or [calls.names[c]]
                first = len(ws_slot)
                for name in feeds:   # a fused epilogue's call streams each producer's rows in turn
                    if name in em.bulk_ops and rows > 0:
                        slot, off, nb = em.weight_bytes(ops[name], *((0, rows) if pool >= 0 else (calls.lo[c], calls.hi[c])))
                        ws_slot.append(slot)
                        ws_offset.append(off)
                        idle = next((n for pat, n in b.l2_idle if re.search(pat, calls.names[c])), 0)
                        cap = next((n for pat, n in b.inflight_ops if re.search(pat, calls.names[c])), 0) \
                            or knob_caps.get(name, 0)
                        if per_op and rows >= 1 << 16:   # the rows word's bits 16-23 carry the caps (ir.RING_ROWS)
                            raise CodegenError(f"inflight_ops: {calls.names[c]}'s ring call streams {rows} rows; with "
                                               "per-op caps a call streams at most 65,535 (retile it)")
                        ahead = ahead_caps.get(name, 0)
                        capped = capped or bool(ahead or b.inflight_ahead)
                        if not (0 <= ahead <= MAX_AHEAD and 0 <= cap <= MAX_INFLIGHT):
                            raise CodegenError(f"{name}: caps of {cap} (1-{MAX_INFLIGHT}) and {ahead} while waiting "
                                               f"(1-{MAX_AHEAD}) do not fit the ring's rows word")
                        ws_rows.append(rows | ((pool + 1) << 16 if pool >= 0 else idle << 24 | ahead << 21 | cap << 16))
                        ws_rowb.append(nb // rows)
                if pool >= 0:
                    ws_rows[first] |= (len(ws_slot) - first) << 24
            if capped and len(ws_slot) > seg0:
                open_end[t] = len(ws_slot) - ws_start[-1]
                if open_end[t] >= 1 << 16:
                    raise CodegenError(f"ahead caps: queue {len(ws_start) - 1} streams {open_end[t]} ring segments; "
                                       "a task's end in its queue's stream must fit 16 bits (retile, or fewer calls)")
        ws_start.append(len(ws_slot))
    return ws_start, ws_slot, ws_offset, ws_rows, ws_rowb, open_end, per_op, ahead_on


def _queue_streams(plan: Plan, calls: _Calls, pools: dict, q_start: list[int], waits: tuple, signals: tuple,
                   prefetches: tuple, open_end: dict, ahead_on: bool) -> tuple[list[int], list[int]]:
    """Each queue's tasks as one stream of int32 words (the kernel's main loop reads nothing else per
    task): a header, then its waits, calls, signals and prefetches."""
    wait_start, wait_counter, wait_target = waits
    signal_start, signal_counter = signals
    pf_start, pf_slot, pf_offset, pf_bytes = prefetches
    q_stream, qs_start = [], [0]
    for qi, q in enumerate(plan.queues):
        for j, t in enumerate(q):
            i = q_start[qi] + j
            w0, w1 = wait_start[t], wait_start[t + 1]
            c0, c1 = calls.start[t], calls.start[t + 1]
            s0, s1 = signal_start[t], signal_start[t + 1]
            f0, f1 = pf_start[i], pf_start[i + 1]
            # inflight_ahead / ahead edits: where the task's capped stages end in the calls word's high half (its calls in the low)
            q_stream += [t, w1 - w0, (c1 - c0) | (open_end.get(t, 0) << 16 if ahead_on else 0), s1 - s0, f1 - f0]
            for w in range(w0, w1):
                q_stream += [wait_counter[w], wait_target[w]]
            for c in range(c0, c1):
                q_stream += ([calls.op[c], 0, pools[calls.names[c]][2], MK_CLAIMED, calls.slots[c]]   # a pool tile's rows
                             if calls.names[c] in pools else
                             [calls.op[c], calls.lo[c], calls.hi[c], calls.part[c], calls.slots[c]])
            q_stream += signal_counter[s0:s1]
            for f in range(f0, f1):
                q_stream += [pf_slot[f], pf_offset[f] & 0xFFFFFFFF, pf_offset[f] >> 32, pf_bytes[f]]
        qs_start.append(len(q_stream))
    return [w - (1 << 32) if w >= (1 << 31) else w for w in q_stream], qs_start   # int32 words


def _shared_memory(plan: Plan, em: "_Emitter", b: "Build", pools: dict, n_slots: int, n_args: int,
                   qs_start: list[int], ws_start: list[int]) -> tuple[bool, int, int, int, int]:
    """What the block's shared memory holds beside the ops' own: the tables (and the task stream, where
    it fits), the ring's segments and as many ring stages as fit. (qs_smem, tab_bytes, segs, stages,
    ring_bytes)."""
    words = max((qs_start[k + 1] - qs_start[k] for k in range(len(plan.queues))), default=0)
    fixed = 1024 + em.smem + -(-(n_slots * 8 + n_args * 4) // 16) * 16
    qs_smem = b.stream == "smem" and (fixed + 4 * words + 2 * WS_STAGE <= SMEM_BLOCK
                                    or fixed + 4 * words <= SMEM_BLOCK and not em.bulk_ops)
    tab_bytes = -(-(n_slots * 8 + n_args * 4 + (4 * words if qs_smem else 0)) // 16) * 16
    segs = max((hi - lo for lo, hi in zip(ws_start, ws_start[1:])), default=0)
    segs = -(-segs // 8) * 8
    seg_bytes = 24 if pools else 16      # WsSeg: a pointer and two ints, two more with claims
    stages = 0
    if em.bulk_ops:
        stages = max(0, min(b.ring_stages, (SMEM_BLOCK - 1024 - em.smem - tab_bytes - seg_bytes * segs) // WS_STAGE))
    if pools and stages < 2:
        raise CodegenError(f"claim: {', '.join(pools)} take tiles through the weight ring, which this plan has no room for")
    ring_bytes = stages * WS_STAGE + seg_bytes * segs if stages > 0 else 0
    return qs_smem, tab_bytes, segs, stages, ring_bytes


def _source(g, em: "_Emitter", b: "Build", impls: dict, bodies: dict, op_ids: dict, functions: list[str],
            pools: dict, table: TaskTable, stages: int, segs: int, per_op: bool, ahead_on: bool, qs_smem: bool,
            n_slots: int, n_args: int, tab_bytes: int) -> str:
    """The templates filled in: the defines, prelude, probes, claims, ring, tensors, device functions
    and the main loop with its dispatch switch."""
    cases = "\n".join(f"        case {i}: op_{i}(T, slot_args + cc[4], cc[1], cc[2], cc[3], sm); "
                       "break;"
                       for i in range(len(bodies)))
    pre_cases = "\n".join(f"        case {fid}: pre_{fid}(T, slot_args + cc[4], cc[1], cc[2], cc[3]); break;"
                           for (_, pre, _), fid in bodies.items() if pre)

    def pre_calls(calls: str, count: str, note: str) -> str:   # the pre_N work of `count` calls at `calls`
        return (f"    for (int c = 0; c < {count}; ++c) {{   // {note}\n"
                f"      const int* cc = {calls} + 5 * c;\n"
                "      switch (cc[0]) {\n" + pre_cases + "\n      }\n    }")
    prewait = pre_calls("C", "nc", "the calls' pre-wait work (pre_N), then the waits") if pre_cases else ""
    if pre_cases and b.kv_prefetch == "ahead":   # and the next task's in this queue (p is at its header now)
        prewait += ("\n    if (p < qn) {   // kv_prefetch=\"ahead\": the next task's pre-wait work too\n"
                    "      const int* C2 = QS + p + 5 + 2 * QS[p + 1];\n"
                    + textwrap.indent(pre_calls("C2", "(QS[p + 2] & MK_CALLS_MASK)", "the next task's calls"), "  ")
                    + "\n    }")
    slots = "\n".join(f"//   T[{i}] = {name}  {list(g.tensors[name].shape)} {g.tensors[name].dtype}"
                      for name, i in em.slots.items())
    ring = (_RING % {"ws_stages": stages, "ws_seg": WS_SEG, "ws_stage": WS_STAGE, "warps": WARPS, "ws_segs": segs,
                     "l2_ahead": b.l2_ahead, "l2_wait": b.l2_wait, "hold": min(b.hold, stages - 1),
                     "l2_idle": int(bool(b.l2_idle)), "inflight": min(b.inflight, stages),
                     "inflight_ops": int(per_op), "evict_first": int(b.ring_l2 == "evict_first"),
                     "ahead": min(b.inflight_ahead, stages), "ahead_on": int(ahead_on)}
            if stages > 0 else _NO_RING)
    claims = f"#define WS_CLAIMS {len(pools)}\n" if pools else ""
    if pools:
        per = [pools[n] for n in pools]
        claims += (f"#define MK_CLAIMED {MK_CLAIMED}        // a claimed op's call (its part word)\n"
                   f"#define MK_CLAIM_AGAIN {MK_CLAIM_AGAIN}    // ... on a tile after its task's first\n"
                   f"// per pool (emit_cuda claim): {', '.join(pools)}\n"
                   f"__device__ const int ws_pool_tiles[] = {{{', '.join(str(n) for n, _, _ in per)}}};\n"
                   f"__device__ const int ws_pool_claims[] = {{{', '.join(str(n + k) for n, k, _ in per)}}};\n"
                   f"__device__ const int ws_pool_slot[] = {{{', '.join(str(em.scratch[n + '#claim'][0]) for n in pools)}}};\n")
    return (f"#define MK_PROBES {int(b.probes)}\n#define MK_CONTROL_WARP {b.control_warp}\n"
            f"#define MK_LL_POLL_NS {b.ll_poll_ns}   // ns before a staged LL vector not yet there is loaded again\n"
            f"#define MK_SIGNAL_RELEASE {int(b.signal == 'release')}\n"
            + _THREADS % {"producer_warp": int(table.threads > THREADS), "nt": THREADS, "maxnreg": table.maxnreg,
                          "producer_regs": 504 - 2 * table.maxnreg if table.maxnreg else 0}
            + _PRELUDE + _PROBES + claims + ring + (_impl_preamble() if impls else "")
            + f"// tensors:\n{slots}\n\n" + "\n".join(functions)
            + f"#define QS_SMEM {int(qs_smem)}   // the queue's task stream is copied into shared memory\n"
            + ("#define MK_CALLS_MASK 0xffff   // a task's calls word: calls, ring segments << 16 (inflight_ahead)\n"
               if ahead_on else "#define MK_CALLS_MASK (~0)\n")
            + _MAIN % {"threads": table.threads, "cases": cases, "prewait": prewait, "ring_init": _RING_INIT if stages > 0 else "",
                       "claim_loop": _CLAIM_LOOP % {"cases": "\n".join(
                           f"            case {i}: op_{i}(T, slot_args + cc[4], tlo, tlo + tl, again ? MK_CLAIM_AGAIN : MK_CLAIMED, "
                           f"sm); break;" for i in sorted({op_ids[n] for n in pools}))} if pools else "",
                       "n_slots": n_slots, "n_args": n_args, "tab_bytes": tab_bytes,
                       "prefetch": _PREFETCH[b.prefetch_mode] % {"chunk": PREFETCH_CHUNK},
                       "l2_wait": _L2_WAIT if stages > 0 and b.l2_wait > 0 else ""})
