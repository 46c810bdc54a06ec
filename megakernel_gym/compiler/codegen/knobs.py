"""emit_cuda's knobs and the kernel's fixed sizes: threads, shared memory, the weight ring's stages, the
enumerations each knob takes, their parsers (parse_hold_ops, parse_l2_idle) and Build, the checked set
that the emit steps pass along.
"""
from __future__ import annotations

import re
from dataclasses import dataclass



THREADS = 256
WARPS = THREADS // 32
# a claimed op's call (emit_cuda claim) in the task stream's part word: its first tile, then the rest
MK_CLAIMED, MK_CLAIM_AGAIN = -2, -3
# the most key and value rows a decode attention task may copy to shared memory before its wait
# (emit_cuda kv_pre): 2 x 16 KB per 64 bf16 rows of 64
KV_PRE_MAX = 256
SMEM_LIMIT = 192 * 1024      # dynamic shared memory one op may use (an H100/H200 block may have 227 KB)
PREFETCH_CHUNK = 32 * 1024   # bytes per cp.async.bulk.prefetch.L2 instruction
WS_SEG = 4096                # weight ring: bytes of one weight row each warp multiplies per stage
WS_STAGE = WARPS * WS_SEG    # bytes per stage (one row segment per warp)
WS_MAX_STAGES = 5            # stages in flight per SM (160 KB; 4 measured 3% slower: ab_knobs_ring5_kvpf.json)
WS_L2_AHEAD = 0              # stages past the ring prefetched to L2 by the ring's producer
# the most ring stages the producer warp keeps issued and not landed (emit_cuda inflight). Every
# poll and signal waits behind the chip's copies in flight: with 5 x 32 KB on every SM a word
# written by one SM took 7.7 us to be seen by another, 1.0 us with 2 in flight, at the same 3.1 TB/s
# (bench/results/poll_probe.json); the 1B expert 1,068 -> 1,029 us (ab_knobs_inflight_combos.json)
INFLIGHT = 2
# the most a ring call may keep in flight (its cap: 5 bits of its rows word beside its rows), and
# while its task still waits for its input (3 bits more: the IR's `ahead` edit)
MAX_INFLIGHT = 16
MAX_AHEAD = 7
X_PLANES = True              # batched (m > 1) bf16 ring matmuls read x from two planes per row (_x_split)
X_BF16 = True                # decode (m = 1) bf16 ring matmuls keep x in shared memory as bf16 (emit_cuda x_bf16)
CONTROL_WARP = 0             # the warp that polls a task's counters and signals its own
SMEM_BLOCK = 227 * 1024      # dynamic + static shared memory one H100/H200 block may have
WEIGHT_PATHS = ("smem", "regs")
# who combines a split attention's parts: the last part to finish (into the op's output), or each
# reader, while it stages the output as a matmul's input (the output is then never stored)
COMBINES = ("last", "reader")
# who issues the weight ring's bulk copies: thread 0, between a call's stages and after a task's signal,
# or a warp of its own beside the WARPS that run task bodies (full and empty barriers per stage)
PRODUCERS = ("thread", "warp")
# setmaxnreg's register counts for the compute warps (multiples of 8); two of their warps and one of the
# producer's warpgroup share a register file of 512 a lane, so the producer keeps 504 - 2 * maxnreg,
# and its ws_produce needs ~72 not to spill (ptxas -v, sm_90a): 216 at most
MAXNREGS = (176, 184, 192, 200, 208, 216)
MAXNREG = 216   # the default since the whole GPU suite passed with it (gpu_tests.json)
# how a task publishes its writes before it adds to its counters: a fence, then relaxed adds, or
# release adds
SIGNALS = ("fence", "release")
CTYPES = {"float32": "float", "bfloat16": "unsigned short", "int64": "long long", "int32": "int"}
LL_CTYPES = {4: "unsigned", 8: "unsigned long long"}   # an LL word per element, by its bytes (hops.LL_WORD_BYTES)
EPV = {"bfloat16": 8, "float32": 4}     # elements per 16-byte load, for the dtypes loaded 16 bytes at a time
ESIZE = {"bfloat16": 2, "float32": 4}   # their bytes per element


class CodegenError(ValueError):
    """The plan uses something this code generator cannot emit yet; says what."""
# where a split decode attention part sends its slice of the KV caches to L2 (the slice depends on
# the step's positions, an input, and on nothing the kernel writes): "wait", before the task's waits
# (the op's pre_N function), "body", at the start of its body, after them, or "ahead", before its
# waits and also a task earlier, before the waits of the task before it in its SM's queue (so a part
# that starts late, its inputs long there, does not load keys whose prefetch is still on its way);
# "ahead" measured 1,017 against 988 us on the 1B expert (ab_knobs_s21_kvahead.json): sent that
# early, during the MLP's stream, the slices were gone again by the time the keys were loaded
KV_PREFETCHES = ("wait", "body", "ahead")
# the L2 eviction priority of the weight ring's bulk copies: "normal", or "evict_first" (a weight is
# read once a step, so its lines are the first to go, before the KV slices, LL words and counters);
# emit_cuda's ring_l2 says where it was measured
RING_L2 = ("normal", "evict_first")
RING_L2_DEFAULT = "evict_first"
# a decode attention's value rows: loaded when p.V needs them ("none"), or sent to L1 by the thread
# that loads the same position's key row ("l1"), so their round trip overlaps the scores
V_PREFETCHES = ("none", "l1")


# how a decode attention reads this step's q, k, v where its producers are fused into it
# (_Emitter.attention_inputs): in its own body, all staged together ("body"), or through the
# producers' prologue calls, one after another ("calls")
STEP_INPUTS = ("body", "calls")


def parse_hold_ops(spec, knob: str = "hold_ops", lo: int = 0, hi: int = 15,
                   what: str = "a call holds") -> tuple[tuple[str, int], ...]:
    """emit_cuda's hold_ops as (op-name pattern, stages held) pairs: None, pairs, a dict, or text
    "PATTERN:N;PATTERN:N" (as bench/ab_knobs.py passes it). A pattern is a regular expression
    searched in the name of the op whose task runs the ring call (the elementwise op of a fused
    epilogue, e.g. 'mlp\\.add$'); N is 0 (release every stage as the call is done with it) to 15.
    `knob`, `lo`, `hi`, `what`: the same form for another per-op count (parse_l2_idle)."""
    if spec is None or spec == "":
        return ()
    if isinstance(spec, str):
        pairs = []
        for item in spec.split(";"):
            pat, sep, n = item.rpartition(":")
            if not sep or not n.strip().isdigit():
                raise CodegenError(f"{knob} item {item!r}: write PATTERN:N, e.g. 'mlp\\.add$:{lo}'")
            pairs.append((pat, int(n)))
        spec = pairs
    elif isinstance(spec, dict):
        spec = list(spec.items())
    out = []
    for pat, n in spec:
        try:
            re.compile(pat)
        except (re.error, TypeError) as e:
            raise CodegenError(f"{knob} pattern {pat!r} is not a regular expression: {e}") from None
        if not (isinstance(n, int) and lo <= n <= hi):
            raise CodegenError(f"{knob} {pat!r}: {n!r} stages; {what} {lo} to {hi}")
        out.append((pat, n))
    return tuple(out)


def parse_l2_idle(spec) -> tuple[tuple[str, int], ...]:
    """emit_cuda's l2_idle, in parse_hold_ops's form: per op-name pattern (the op whose task runs
    the ring call), how many of the call's stages past the ring the producer warp sends to L2 while
    the ring sits full and landed, its oldest stage unreleased (the task before is waiting for its
    inputs, so this SM's share of the memory pipe is idle), 1 to 64."""
    return parse_hold_ops(spec, "l2_idle", 1, 64, "the producer sends")


@dataclass(frozen=True)
class Build:
    """emit_cuda's knobs, checked, as one value _emit and _emit_once pass along (emit_cuda documents
    each). Where emit_cuda falls back to weights in registers, the ring's knobs keep these defaults."""
    prefetch_mode: str = "bulk"
    weights: str = "smem"
    stream: str = "smem"
    ring_stages: int = WS_MAX_STAGES
    l2_ahead: int = 0
    l2_wait: int = 0
    probes: bool = False
    control_warp: int = CONTROL_WARP
    hops: str = "counters"
    combine: str = "last"
    producer: str = "warp"
    signal: str = "fence"
    hold: int = 15
    kv_prefetch: str = "body"
    ll_poll_ns: int = 0
    hold_ops: tuple[tuple[str, int], ...] = ()
    step_inputs: str = "body"
    kv_pre: int = 0
    claim: str | None = None
    claim_split: int = 1
    l2_idle: tuple[tuple[str, int], ...] = ()
    inflight: int = 16
    inflight_ops: tuple[tuple[str, int], ...] = ()
    x_bf16: bool = X_BF16
    ring_l2: str = RING_L2_DEFAULT
    v_prefetch: str = "none"
    inflight_ahead: int = 0
    distinct_ops: str = ""
    maxnreg: int = 0
