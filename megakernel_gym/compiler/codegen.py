"""Codegen: a validated Plan -> CUDA C for one persistent megakernel (stage 1: correct, simple).

    source, table = emit_cuda(plan)        # readable CUDA C + the task table the runtime uploads

One thread block per SM queue runs its tasks in order. Before a task, the lanes of warp 0 spin
on the counters it waits for, side by side (ld.acquire.gpu), each with a spin budget; past the budget the kernel records
(task, counter) in `status` and traps, so a bad schedule ends in an error, never a hung GPU.
After a task, the block syncs and thread 0 publishes with a fence and an atomic add to each
counter the task produces into. Fused producers run first, inside the consumer's task, over
the box of their output the consumer reads (written to their global buffer, then read back
by the same block: correct, if not yet on chip).

Every op becomes a device function over [lo, hi) along its tile axis, with shapes, strides
and dtypes as constants and its tensors as slot arguments, so ops alike in all but their tensors
(the same projection in 16 layers) share one function. Tensors live in one pointer table `T` (views alias their base; a
cache_write's output aliases its cache). bf16 is handled as raw 16-bit words converted by
hand (round to nearest even), so no CUDA header is needed and NVRTC compiles it anywhere.
Arithmetic is float32 throughout, as the graph's reference ops do.

Speed comes later (issue: 16-byte loads, several loads in flight, prefetch); this stage is
what the differential tests on the GPU check first.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field, replace

from megakernel_gym.compiler.expr import parse_expr
from megakernel_gym.compiler.graph import Graph, Op
from megakernel_gym.compiler.hops import HOPS, LL_WORD_BYTES, kept_waits, ll_tensors
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import INLINE, task_boxes

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


IMPL_CONTRACT = f"""\
An impl body is CUDA C that computes one task: the tile [lo, hi) of the op's output along its tile
axis (every other axis whole; `part` is 0), run by all {THREADS} threads of the SM's block (blockDim.x; use
__syncthreads() freely, by every thread alike). In scope: in0, in1, ... (the op's inputs, in the order the
IR's in= lists them, read-only) and out (the output), elements typed float / unsigned short (bf16 bits) /
long long / int by dtype, each with its shape as inN_shape[] / out_shape[] (row-major, contiguous); lo, hi;
tile_axis; sm ({SMEM_LIMIT // 4} floats of shared memory); helpers bf2f(u16) -> float, f2bf(float) -> u16,
warp_sum, warp_max, block_sum(v, red) with red a __shared__ float[{WARPS}]; INFINITY, NAN.
Memory is reached by index only: in0[i], out[i], sm[i] and arrays the body declares (float acc[4];
__shared__ float red[{WARPS}];). Every index is checked on the GPU: out[i] only inside the task's tile, in0[i]
inside its tensor, an array inside its extent; an index out of range is an error naming the op.
Not allowed (refused at edit time, however spelled: digraphs, trigraphs, line splices count): preprocessor
lines, _Pragma and ## pasting, string literals, pointers (&x, *p, float*, casts to pointer or reference
types, an array or tensor used without its index, ->), asm, static or extern storage, new functions, types
or templates, timers, sleeps, traps, compiler intrinsics (__builtin_*, __nvvm_*), malloc/new/printf, and the
kernel's own tables and helpers (T, S, counters, mk_*). The cpu and sim backends compile a body but never
run it: a plan with impl bodies is scored (status not_run) on the gpu backend only."""


def impl_code_problem(code: str) -> str | None:
    """Why an impl body may not go into the megakernel, or None: the body read as the C
    preprocessor reads it and checked as tokens (compiler/impl_guard.py says what and why)."""
    from megakernel_gym.compiler.impl_guard import impl_code_problem as problem
    return problem(code)


def _streams(g: Graph, op: Op) -> bool:
    """Whether a matmul gets the streamed decode body: an NK weight in 16-byte loads, its input
    vector(s) whole in shared memory, tiled along output columns."""
    x, w = op.inputs[0], op.inputs[1]
    oshape = g.tensors[op.outputs[0]].shape
    k = g.tensors[x].shape[-1]
    m = 1
    for dim in oshape[:-1]:
        m *= dim
    epv = EPV.get(g.tensors[w].dtype, 0)
    return (op.attrs.get("w_layout", "NK") == "NK" and bool(epv) and k % epv == 0
            and m * k * 4 + 4 * WARPS <= SMEM_LIMIT)


def ring_packed(rowb: int) -> bool:
    """Whether weight rows of `rowb` bytes come through the ring as packed stages (WS_STAGE
    contiguous bytes: whole rows of 1, 2, 4 or 8 segments), which both the producer (ws_at) and
    the consumer (_ring_rows) decide from the row's bytes alone."""
    return rowb % WS_SEG == 0 and WARPS % (rowb // WS_SEG) == 0


def _ring_scratch(m: int, k: int, x_bf16: bool = False) -> tuple[int, int]:
    """A ring-fed matmul's op scratch, in floats from `sm`: x staged as float [0, m*k) (as bf16,
    x_bf16: [0, m*k/2)), a fused norm's block reduction (WARPS), then pbuf, the split rows' segment
    sums (two stages of m x WARPS). Returns (pbuf's offset, the end), the first float a fused
    epilogue may keep rows at."""
    pbuf = (m * k // 2 if x_bf16 else m * k) + WARPS
    return pbuf, pbuf + 2 * m * WARPS


def _ring_loop(m: int, segv: int, kv: int, u: int, first: bool, nst: str, head: str, row: str, reset: str,
               mac: str, done: str, combine: str, producer: str = "thread", last: bool = True,
               hold: str = "WS_HOLD") -> str:
    """A ring-fed matmul's stage loop around one stage layout's pieces (_Emitter._ring_rows): `row`
    names this warp's segment cs and row n in stage s, `reset` clears acc, `mac` adds one 16-byte
    weight vector wv at column c, `done` ends the warp's part of a row, `combine` runs after the
    stage's barrier, before the stage's buffer is refilled. A call's last buffer is refilled by
    the next ring call's first stage, or after the task has signalled (WS_REFILL), whichever
    comes first: bulk copies issued just before the signal delay its fence (1B expert on an
    H100: 1,276 -> 1,214 us). A call starts with its first stage not yet issued only after calls
    of one stage each on a ring of two; it issues it then.

    With producer="warp" a warp of its own issues the copies (ws_produce): each compute warp
    releases a stage when it is done with it (ws_release) and goes on to the next one, with no
    block barrier per stage and no copy issued in its way; `combine` then syncs only the warps
    it needs. The `last` loop of a call holds its last WS_HOLD stages back (ws.held, ws.nheld),
    released by thread 0 after the task's signal (WS_REFILL) or before the next ring call,
    whichever comes first: the signal's fence waits for the block's bulk copies in flight, and a
    producer warp refilling every buffer at once put copies in flight at every signal (1B expert
    on an H100: q/k/v tails 1.3 -> 3.4 us with none held, 0.55 us with three). `hold`: the
    count held, WS_HOLD or a number of this call's own (emit_cuda's hold_ops)."""
    return (f"  {{\n"
            f"  const int nst = {nst};\n"
            + head +
            f"  float acc[{m}];\n"
            + ("  if (threadIdx.x == 0) ws_unhold();      // the stage a call before this one held back\n"
               if producer == "warp" else
               "  if (threadIdx.x == 0 && ws.issued <= g) ws_pump(g + WS_STAGES);   // calls of one stage with a ring of two\n") +
            f"  for (int s = 0; s < nst; ++s, ++g) {{\n"
            f"    {row}\n"
            + reset +
            f"    ws_wait(g);\n"
            + ("    if (s == 0) MK_PROBE(PROBE_FIRST);\n" if first else "") +
            f"    if (n < hi) {{\n"
            f"      const uint4* Ws = (const uint4*)(ws_stage(g) + warp * {WS_SEG});\n"
            f"#pragma unroll\n"
            f"      for (int j = 0; j < {u}; ++j) {{\n"
            f"        const int cl = j * 32 + lane, c = cs * {segv} + cl;\n"
            f"        if (c < {kv}) {{\n"
            f"          const uint4 wv = Ws[cl];\n"
            f"          {mac}\n"
            f"        }}\n"
            f"      }}\n"
            + done +
            f"    }}\n"
            + ((f"    if (s + {hold} < nst) ws_release(g);   // done with stage g: the producer refills it "
                f"(the last {hold}: WS_REFILL)\n"
                if last else
                "    ws_release(g);                        // this warp is done with stage g: the producer refills it\n")
               + combine if producer == "warp" else
               "    MK_SYNC();                      // every warp is done with stage g: refill its buffer\n"
               + combine +
               "    if (threadIdx.x == 0 && s + 1 < nst) ws_pump(g + 1 + WS_STAGES);   // the last: WS_REFILL\n") +
            f"  }}\n"
            + (f"  if (threadIdx.x == 0 && nst > 0) {{ ws.nheld = min(nst, {hold}); ws.held = g - ws.nheld; }}"
               "   // released after the task's signal\n"
               if producer == "warp" and last else "") +
            f"  MK_PROBE(PROBE_LAST);\n"
            f"  }}\n")


def _dot_exprs(epv: int, w: str) -> tuple[str, str]:
    """A streamed matmul's inner step: (the dot of 16 weight bytes `w` with x at vector c, the load
    of that x from shared memory as float4s) for bf16 (8 per load) or float32 (4) weights."""
    if epv == 8:
        return f"dot_bf16x8({w}, xa, xb)", "const float4 xa = X4[2 * c], xb = X4[2 * c + 1];"
    return f"dot_f32x4({w}, xa)", "const float4 xa = X4[c];"


def _x_split(m: int, epv: int) -> bool:
    """Whether a ring-fed matmul of m > 1 rows keeps x in shared memory split in two planes per row
    (elements 8c..8c+3 of each 8 at float4 c of the first half, 8c+4..8c+7 of the second: mk_xp),
    so that a warp's lanes read 16 contiguous bytes each: from the natural layout (two float4s 32
    bytes apart per lane) every x load was a 2-way bank conflict, and with m rows x is read m times
    per weight vector, which made batched bf16 steps bound by shared memory. Staging writes the
    planes directly (stage(planes=k)); a fused norm reads its columns through mk_xp."""
    return X_PLANES and m > 1 and epv == 8


def onchip_norm_problem(g: Graph, norm: Op, matmul: Op) -> str | None:
    """Why `norm` cannot run inside `matmul`'s task on chip (its output is the matmul's input vector,
    computed in the matmul's shared memory), or None."""
    if norm.kind != "rmsnorm":
        return f"{norm.name} is a {norm.kind}; only an rmsnorm runs inside a matmul on chip"
    if matmul.kind != "matmul" or matmul.inputs[0] != norm.outputs[0]:
        return f"{matmul.name} does not read {norm.name}'s output as the vector it multiplies"
    if len(g.tensors[norm.outputs[0]].shape) != 2:
        return f"{norm.name}'s output is not [rows, features]"
    if not _streams(g, matmul):
        return (f"{matmul.name} does not take the streamed body (an NK bf16/float32 weight with its input rows "
                f"within {SMEM_LIMIT} bytes of shared memory)")
    return None


def _attention_parallel(g: Graph, op: Op) -> bool:
    """Whether decode attention gets the parallel body (16-byte rows, a head row in one warp's lanes)."""
    _, kc, vc, _ = op.inputs
    d = g.tensors[op.outputs[0]].shape[-1]
    cdt = g.tensors[kc].dtype
    epv = EPV.get(cdt, 0)
    return bool(epv) and cdt == g.tensors[vc].dtype and d % epv == 0 and 32 % (d // epv) == 0


def attention_split_problem(g: Graph, op: Op) -> str | None:
    """Why decode attention `op` cannot be split over its positions, or None."""
    if op.kind != "decode_attention":
        return f"{op.name} is a {op.kind}; only decode_attention splits its cached positions"
    if not _attention_parallel(g, op):
        return (f"{op.name}'s caches are not in 16-byte rows of bf16/float32 that one warp's lanes cover, which "
                "the split body needs")
    return None


@dataclass
class TaskTable:
    """What the runtime uploads beside the source: CSR arrays over SM queues and tasks."""
    q_start: list[int]            # per SM: first index into q_task (num_sms + 1 entries)
    q_task: list[int]
    call_start: list[int]         # per task: first index into call_* (prologue calls, then its own op)
    call_op: list[int]
    call_lo: list[int]
    call_hi: list[int]
    wait_start: list[int]         # per task: first index into wait_*
    wait_counter: list[int]
    wait_target: list[int]
    signal_start: list[int]       # per task: first index into signal_counter
    signal_counter: list[int]
    num_counters: int
    call_slots: list[int] = field(default_factory=list)      # per call: where its op's slots start in slot_args
    slot_args: list[int] = field(default_factory=list)       # per op: the T indices its function's S[k] are
    slots: dict[str, int] = field(default_factory=dict)      # base tensor -> index in T
    aliases: dict[str, str] = field(default_factory=dict)    # every tensor -> the base whose memory it is
    op_ids: dict[str, int] = field(default_factory=dict)     # op -> its device function's id
    pf_start: list[int] = field(default_factory=list)        # per queue position (index into q_task): its prefetches
    pf_slot: list[int] = field(default_factory=list)         # T index of the weight
    pf_offset: list[int] = field(default_factory=list)       # first byte
    pf_bytes: list[int] = field(default_factory=list)
    smem_bytes: int = 0                                      # dynamic shared memory the kernel needs
    call_part: list[int] = field(default_factory=list)       # per call: the split part its task computes (else 0)
    scratch: dict[str, tuple[int, int]] = field(default_factory=dict)   # split op's scratch -> (T index, bytes),
    #                                                                     zeroed once when bound
    ws_start: list[int] = field(default_factory=list)        # per queue: its first weight-ring segment
    ws_slot: list[int] = field(default_factory=list)         # T index of the weight
    ws_offset: list[int] = field(default_factory=list)       # byte of the segment's first row
    ws_rows: list[int] = field(default_factory=list)
    ws_rowb: list[int] = field(default_factory=list)         # bytes per weight row
    ws_stages: int = 0                                       # ring stages (0: streamed matmuls load to registers)
    q_stream: list[int] = field(default_factory=list)        # per queue, its tasks as the kernel reads them
    qs_start: list[int] = field(default_factory=list)        # per queue: its first word in q_stream
    qs_in_smem: bool = False                                 # whether the kernel copies each stream into smem
    epilogues: dict[str, list[str]] = field(default_factory=dict)   # elementwise op -> the matmuls its one call
    #                                                                 runs first (a real epilogue fusion)
    trace_words: int = 2                                     # trace words per task (PROBE_WORDS with probes)
    threads: int = THREADS                                   # threads per block (THREADS, plus a producer warp)
    maxnreg: int = 0                                         # the compute warps' registers via setmaxnreg (sm_90a), or 0
    ll: list[str] = field(default_factory=list)              # base tensors kept as LL words (hops.py): 4 bytes
    #                                                          per element, zeroed when bound, the epoch per launch


# ---------------------------------------------------------------------------------------------
# tensors: views alias their base


def _bases(g: Graph) -> dict[str, str]:
    """tensor -> the tensor whose memory it is (itself, or what a contiguous reshape aliases)."""
    base = {t: t for t in g.tensors}
    for op in g.ops:
        if op.kind == "view":
            if op.attrs.get("op") != "reshape":
                raise CodegenError(f"op {op.name}: view {op.attrs.get('op')!r} is not emitted yet (only "
                                   "contiguous reshapes alias memory as is)")
            base[op.outputs[0]] = base[op.inputs[0]]
        elif op.kind == "cache_write":
            base[op.outputs[0]] = base[op.inputs[0]]
    return base


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _strides(shape) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def attention_inputs(g: Graph, op: Op, fused: dict[str, str], writer: dict[str, Op],
                     impls: dict[str, str]) -> dict | None:
    """How a decode attention whose producers are fused into it reads this step's q, k and v in
    its own body, instead of through prologue calls that each poll their input, write memory
    and sync before the next: q's rope, and each cache write with k's rope, fused into it. The
    body stages the projections' rows at once (one poll for all three), ropes them on chip,
    stores the new k and v rows to the caches and then reads the caches as ever. Returns
    {"q": (tensor staged, rope op or None), "kc"/"vc": (cache_write op, tensor staged, rope op
    or None) for each fused cache write, "ops": the producers absorbed}, or None where any
    producer fused into it is not of these forms (the prologue calls then run as they are). The cost
    model asks the same of a task's fused chain (costmodel._call_trips)."""
    into = [n for n, c in fused.items() if c == op.name]
    if not into or any(n in impls for n in into):
        return None
    q, kc, vc, _ = op.inputs
    if g.tensors[op.outputs[0]].shape[-1] % 4 or not _attention_parallel(g, op):
        return None        # head rows staged as float4s, in the parallel body (_step_inputs)
    out: dict = {"ops": set()}

    def roped(t: str, consumer: str):
        """(tensor to stage, the rope fused into `consumer` that makes t, or None)."""
        r = writer.get(t)
        if r is not None and r.kind == "rope" and fused.get(r.name) == consumer and r.name not in impls \
                and len(g.tensors[t].shape) == 3 and g.tensors[t].shape[-1] % 2 == 0 \
                and r.name not in fused.values():
            out["ops"].add(r.name)
            return r.inputs[0], r
        return t, None

    out["q"] = roped(q, op.name)
    for key, cache in (("kc", kc), ("vc", vc)):
        cw = writer.get(cache)
        if cw is not None and cw.kind == "cache_write" and fused.get(cw.name) == op.name:
            out["ops"].add(cw.name)
            src, rope = roped(cw.inputs[1], cw.name)
            if any(c == cw.name and n != (rope.name if rope else None) for n, c in fused.items()):
                return None
            out[key] = (cw, src, rope)
    return out if set(into) <= out["ops"] else None


class _Emitter:
    def __init__(self, plan: Plan, impls: dict[str, str] | None = None, weights: str = "smem",
                 ll: frozenset[str] = frozenset(), combine: str = "last", producer: str = "thread",
                 kv_prefetch: str = "body", hold_ops: tuple[tuple[str, int], ...] = (),
                 step_inputs: str = "body", kv_pre: int = 0, claim: str | None = None, x_bf16: bool = X_BF16,
                 v_prefetch: str = "none"):
        self.plan, self.g = plan, plan.tg.graph
        # ops whose tiles the SMs that run them take from a pool as they go (emit_cuda claim): a
        # task stages its input once and keeps it for every tile it takes after its first
        self.claim_ops = ({n for n, ids in plan.tg.by_op.items() if ids and re.search(claim, n)}
                          if claim else set())
        # a decode attention task loads its first chunk of cached keys and values (rows before this
        # step's) into registers before it stages its inputs, and takes this step's new rows, where
        # it stores them itself, from shared memory (_decode_attention_parallel)
        self.kv_pre = kv_pre
        # decode bf16 ring matmuls keep x in shared memory as bf16, half the float bytes (_x_half)
        self.x_bf16 = x_bf16
        # (op-name pattern, stages held) for the ring calls of ops that hold other than WS_HOLD (the first match)
        self.hold_ops = hold_ops
        self._hold = "WS_HOLD"
        # where a split attention part sends its slice of the KV caches to L2 (KV_PREFETCHES): before
        # the task's waits ("wait", and "ahead" also a task earlier: the op's pre-wait body,
        # self.prewait) or at the body's start
        self.kv_prefetch = kv_prefetch
        # whether the scores loop sends each value row to L1 for p.V (V_PREFETCHES)
        self.v_prefetch = v_prefetch
        self.prewait = ""
        # who issues the weight ring's copies: thread 0 between stages, or a warp of its own (PRODUCERS)
        self.producer = producer
        # base tensors kept as LL words (hops.py): every access polls or stamps the launch's epoch
        self.ll = ll
        # how each base tensor is reached (hops.ll_tensors picks LL tensors from it): "stage", "store",
        # "load <op kind>" or "raw" (a pointer handed to code that indexes it itself)
        self.access: dict[str, set[str]] = {}
        self._kind = ""
        self.called: set[str] = set()   # ops run as prologue calls inside other ops' tasks (set by _emit_once)
        # streamed matmuls read their weights from a ring in shared memory that bulk copies fill
        # ahead of the task (weights="smem"), or straight into registers (weights="regs")
        self.weights = weights
        self.bulk_ops: set[str] = set()
        self.epilogues: dict[str, list[Op]] = {}   # elementwise op -> its matmuls, run as one call (set by _emit)
        # ops whose bodies open their task's ring stages once the input is staged (MK_OPEN): those with an
        # `ahead` cap, or every op under emit_cuda's inflight_ahead (None; set by _emit)
        self.open_ops: frozenset[str] | None = frozenset()
        self._open = False   # the op being emitted is one of them (op_body)
        self.base = _bases(self.g)
        names = sorted({self.base[t] for t in self.g.tensors})
        self.slots = {t: i for i, t in enumerate(names)}
        self.smem = 0
        knobs = plan.knobs
        self.splits = {k: v for k, v in ((knobs.splits if knobs else {}) or {}).items() if v > 1}
        self.combine = combine   # who combines a split attention's parts (COMBINES)
        # split attention: a scratch buffer per op (arrival counts, then each part's partial sums), past the tensors
        self.scratch: dict[str, tuple[int, int]] = {}
        for name in sorted(self.splits):
            self.scratch[name + "#scratch"] = (len(self.slots) + len(self.scratch), self.split_scratch_bytes(name))
        # matmuls whose input vector is a fused rmsnorm's output: the norm runs in the matmul's own
        # staging of that vector, in shared memory, and never writes memory (impl bodies excepted)
        fused = (knobs.fused if knobs else {}) or {}
        writer = {o.outputs[0]: o for o in self.g.ops if o.kind != "view"}
        self.onchip: dict[str, Op] = {}
        for op in self.g.ops:
            norm = writer.get(op.inputs[0]) if op.kind == "matmul" else None
            if (norm is not None and norm.kind == "rmsnorm" and fused.get(norm.name) in (op.name, INLINE)
                    and op.name not in (impls or {}) and onchip_norm_problem(self.g, norm, op) is None):
                self.onchip[op.name] = norm
        self.onchip_norms = {n.name for n in self.onchip.values()}
        # split attention outputs that their readers combine from the parts' partials (combine="reader")
        self.deferred = self.reader_combined(impls or {}) if combine == "reader" else {}
        # decode attentions that take their fused producers (q's rope, the cache writes and k's rope)
        # into their own body: attention op -> its step inputs (attention_inputs)
        self.absorbed = {o.name: a for o in self.g.ops if o.kind == "decode_attention" and o.name not in (impls or {})
                         and step_inputs == "body" for a in [attention_inputs(self.g, o, fused, writer, impls or {})] if a}

    def reader_combined(self, impls: dict[str, str]) -> dict[str, str]:
        """Base tensor -> split attention op, for each split output that only streamed matmuls read, as
        their input vector (staged whole into shared memory by _stage_x, so `stage` can combine the
        parts there), that is no graph output and whose head rows are whole float4 runs. Its parts
        then only write their partials: no arrival count, no last part's round trips to combine and
        store, before the readers' wait is over."""
        kept = {self.base[t] for t in list(self.g.outputs) + self.g.written_buffers()}
        out = {}
        for name in self.splits:
            op = self.g.op(name)
            b = self.base[op.outputs[0]]
            if b in kept or self.g.tensors[op.outputs[0]].shape[-1] % 4:
                continue
            readers = [o for o in self.g.ops if o.kind != "view" and o.name != name
                       and any(self.base[t] == b for t in o.inputs)]
            if readers and all(o.kind == "matmul" and self.base[o.inputs[0]] == b and o.name not in impls
                               and all(self.base[t] != b for t in o.inputs[1:]) and _streams(self.g, o)
                               for o in readers):
                out[b] = name
        return out

    def part_stride(self, d: int) -> int:
        """Floats per (sequence, head, part) partial: the row, its max and its sum, padded to 16 bytes
        so that a reader combining the parts loads the row in float4s."""
        return -(-(d + 2) // 4) * 4

    def scratch_ptr(self, name: str, ctype: str) -> str:
        """A split op's scratch buffer inside its function: a slot argument like a tensor's."""
        key = name + "#scratch"
        if key not in self._args:
            self._args.append(key)
        return f"(({ctype}*)T[S[{self._args.index(key)}]])"

    def arrival_words(self, name: str) -> int:
        """4-byte words before a split op's partials in its scratch: one arrival count per head tile,
        padded to 16 bytes."""
        hq = self.g.tensors[self.g.op(name).outputs[0]].shape[1]
        return 4 * (-(-(hq // self.plan.tg.tiling[name][2]) // 4))

    def split_scratch_bytes(self, name: str) -> int:
        """Arrival counts, then float partials: per (sequence, q head, part) the unnormalized output
        row, its max and its sum, as floats."""
        b, hq, d = self.g.tensors[self.g.op(name).outputs[0]].shape
        return 4 * self.arrival_words(name) + 4 * b * hq * self.splits[name] * self.part_stride(d)

    def ptr(self, tensor: str, how: str = "raw") -> str:
        """The tensor's memory inside an op function: its k-th slot argument, so that ops alike in
        everything but their tensors (the same projection in every layer) share one function.
        `how` records the access (load, store and stage pass theirs; any other is "raw")."""
        spec = self.g.tensors[tensor]
        ct = CTYPES.get(spec.dtype)
        if ct is None:
            raise CodegenError(f"tensor {tensor}: dtype {spec.dtype} is not emitted yet")
        b = self.base[tensor]
        self.access.setdefault(b, set()).add(how)
        if b in self.ll:
            if how == "raw":
                raise CodegenError(f"tensor {tensor}: an LL tensor reached by raw pointer (hops.ll_tensors admits none)")
            ct = LL_CTYPES[LL_WORD_BYTES[spec.dtype]]
        if b not in self._args:
            self._args.append(b)
        return f"(({ct}*)T[S[{self._args.index(b)}]])"

    def load(self, tensor: str, idx: str) -> str:
        dt = self.g.tensors[tensor].dtype
        p = self.ptr(tensor, f"load {self._kind}")
        if self.base[tensor] in self.ll:   # polls until this launch's word is there
            return f"{'ll_bf' if dt == 'bfloat16' else 'll_f32'}({p} + ({idx}))"
        if dt == "bfloat16":
            return f"bf2f({p}[{idx}])"
        return f"(float)({p}[{idx}])" if dt == "float32" else f"{p}[{idx}]"

    def store(self, tensor: str, idx: str, value: str) -> str:
        dt = self.g.tensors[tensor].dtype
        p = self.ptr(tensor, "store")
        if self.base[tensor] in self.ll:   # value and epoch in one store
            return f"ll_st({p} + ({idx}), {'f2bf' if dt == 'bfloat16' else ''}({value}));"
        v = f"f2bf({value})" if dt == "bfloat16" else f"({CTYPES[dt]})({value})"
        return f"{p}[{idx}] = {v};"

    def weight_bytes(self, op: Op, lo: int, hi: int) -> tuple[int, int, int] | None:
        """(T index, first byte, bytes) of the weight rows [lo, hi) a matmul task streams, when they
        are one 16-byte-aligned run of memory (an NK weight); None otherwise."""
        if op.kind != "matmul" or op.attrs.get("w_layout", "NK") != "NK":
            return None
        spec = self.g.tensors[op.inputs[1]]
        size = ESIZE.get(spec.dtype)
        row = spec.shape[-1] * (size or 0)
        if not row or row % 16:
            return None
        return self.slots[self.base[op.inputs[1]]], lo * row, (hi - lo) * row

    def stage(self, tensor: str, offset: str, count, dst: str, vec_ok: bool = True, unit: int = 0,
              planes: int = 0, half: bool = False) -> str:
        """Copy `count` elements (a number, or a C expression that `unit` divides) of `tensor` from
        element `offset` into float shared memory at `dst`. With `planes` = k, element e lands where
        mk_xp(e, k) puts it (rows of k in two planes, _x_split); groups of 4 stay together. With
        `half` (a bf16 tensor, no planes) the elements land as bf16, unchanged, at (u16*)dst + e.

        Loads go to registers in batches before any store: `sm` reaches an op function as a
        generic pointer, so the compiler may not move a global load above a shared store, and a
        load-store loop would wait out one memory latency per element. With vec_ok (the offset is
        a multiple of the vector width) each load is 16 bytes."""
        dt = self.g.tensors[tensor].dtype
        if half and (planes or dt != "bfloat16" or self.base[tensor] in self.deferred
                     or not isinstance(count, int) or count % EPV["bfloat16"]):
            raise CodegenError(f"staging {tensor} as bf16: only a bf16 tensor of its own, in one plane, "
                               "in whole 16-byte loads")
        if self.base[tensor] in self.deferred:
            return self._stage_combined(self.deferred[self.base[tensor]], offset, count, dst, planes)
        at = (lambda e: f"mk_xp({e}, {planes})") if planes else (lambda e: e)   # noqa: E731
        epv = EPV.get(dt, 0)
        p = self.ptr(tensor, "stage")
        per = 16 // LL_WORD_BYTES[dt] if self.base[tensor] in self.ll else 0   # LL words per 16 bytes
        if per and vec_ok and (unit or count) % per == 0:
            # LL words, 16 bytes a load, all four of a thread's batch in flight together; the ones
            # not this launch's yet are loaded again together, so a batch waits one trip per poll
            nv = count // per if isinstance(count, int) else f"(({count}) / {per})"
            vt, ld, ok, dt_, conv = (("ulonglong2", "ll_ld2", "ll_ok2", "float2",
                                      "make_float2(__uint_as_float((unsigned)r[j].x), __uint_as_float((unsigned)r[j].y))")
                                     if per == 2 else
                                     ("uint4", "ll_ld4", "ll_ok4", "float4",
                                      "make_float4(__uint_as_float(r[j].x << 16), __uint_as_float(r[j].y << 16), "
                                      "__uint_as_float(r[j].z << 16), __uint_as_float(r[j].w << 16))"))
            if half:   # four LL words' bf16 halves (the low 16 bits; the epoch is the high) as 8 bytes
                dt_, conv = "uint2", "make_uint2(__byte_perm(r[j].x, r[j].y, 0x5410), __byte_perm(r[j].z, r[j].w, 0x5410))"
            return (f"  {{\n"
                    f"    const {vt}* src = (const {vt}*)({p} + ({offset}));\n"
                    f"    {dt_}* dd = ({dt_}*)({dst});\n"
                    f"    for (int v0 = threadIdx.x; v0 < {nv}; v0 += 4 * MK_NT) {{\n"
                    f"      {vt} r[4];\n"
                    f"#pragma unroll\n"
                    f"      for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; if (v < {nv}) r[j] = {ld}(src + v); }}\n"
                    f"      for (unsigned long long tries = 0;; ++tries) {{\n"
                    f"        bool all = true;\n"
                    f"#pragma unroll\n"
                    f"        for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; "
                    f"if (v < {nv} && !{ok}(r[j])) all = false; }}\n"
                    f"        if (all) break;\n"
                    f"        if (tries > mk_spins) __trap();\n"
                    f"#if MK_LL_POLL_NS > 0\n"
                    f"        __nanosleep(MK_LL_POLL_NS);\n"
                    f"#endif\n"
                    f"#pragma unroll\n"
                    f"        for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; "
                    f"if (v < {nv} && !{ok}(r[j])) r[j] = {ld}(src + v); }}\n"
                    f"      }}\n"
                    f"#pragma unroll\n"
                    f"      for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; if (v < {nv}) "
                    + (f"*({dt_}*)(({dst}) + {at(f'v * {4 if per == 4 else 2}')}) = {conv}; }}\n" if planes else
                       f"dd[v] = {conv}; }}\n") +
                    f"    }}\n"
                    f"  }}\n")
        if self.base[tensor] in self.ll:
            vec_ok = False
        if vec_ok and epv and (unit or count) % epv == 0:
            nv = count // epv if isinstance(count, int) else f"(({count}) / {epv})"
            # float4 i of the copy, at its place (in the planes: the same float4, where mk_xp puts it)
            d4 = (lambda i: f"*(float4*)(({dst}) + {at(f'4 * ({i})')})") if planes else (lambda i: f"d4[{i}]")  # noqa: E731
            unpack = (f"float f[8]; unpack_bf16x8(r[j], f); {d4('2 * v')} = make_float4(f[0], f[1], f[2], f[3]); "
                      f"{d4('2 * v + 1')} = make_float4(f[4], f[5], f[6], f[7]);" if epv == 8 else
                      f"{d4('v')} = make_float4(__uint_as_float(r[j].x), __uint_as_float(r[j].y), "
                      "__uint_as_float(r[j].z), __uint_as_float(r[j].w));")
            if half:
                unpack = "((uint4*)(" + dst + "))[v] = r[j];"
            return (f"  {{\n"
                    f"    const uint4* src = (const uint4*)({p} + ({offset}));\n"
                    f"    float4* d4 = (float4*)({dst});\n"
                    f"    for (int v0 = threadIdx.x; v0 < {nv}; v0 += 4 * MK_NT) {{\n"
                    f"      uint4 r[4];\n"
                    f"#pragma unroll\n"
                    f"      for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; if (v < {nv}) r[j] = src[v]; }}\n"
                    f"#pragma unroll\n"
                    f"      for (int j = 0; j < 4; ++j) {{ const int v = v0 + j * MK_NT; if (v < {nv}) {{ {unpack} }} }}\n"
                    f"    }}\n"
                    f"  }}\n")
        return (f"  for (int e0 = threadIdx.x; e0 < {count}; e0 += 4 * MK_NT) {{\n"
                f"    float r[4];\n"
                f"#pragma unroll\n"
                f"    for (int j = 0; j < 4; ++j) {{ const int e = e0 + j * MK_NT; "
                f"r[j] = e < {count} ? {self.load(tensor, f'({offset}) + e')} : 0.f; }}\n"
                f"#pragma unroll\n"
                f"    for (int j = 0; j < 4; ++j) {{ const int e = e0 + j * MK_NT; if (e < {count}) ({dst})[{at('e')}] = r[j]; }}\n"
                f"  }}\n")

    def cache_bytes(self, op: Op, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(T index, first byte, bytes) of the KV cache regions a decode_attention task over q heads
        [lo, hi) reads: every slot of each kv head, for both caches. All but the new token's row
        were there before the step, so they can stream into L2 while the task waits."""
        if op.kind != "decode_attention":
            return []
        q, kc, vc, _ = op.inputs
        b, hq, _ = self.g.tensors[op.outputs[0]].shape
        _, hkv, s_max, d = self.g.tensors[kc].shape
        size = ESIZE.get(self.g.tensors[kc].dtype)
        if not size or (s_max * d * size) % 16:
            return []
        group = hq // hkv
        region = s_max * d * size
        return [(self.slots[self.base[c]], (bb * hkv + kvh) * region, region)
                for bb in range(b) for kvh in range(lo // group, (hi - 1) // group + 1) for c in (kc, vc)]

    def prologue_calls(self, task) -> list[tuple[str, tuple]]:
        """The task's fused producers that run as calls of their own: all but the norms that each
        reader of theirs in this task computes on chip."""
        return [task.prologue[i] for i in self._prologue_kept(task)]

    def _prologue_kept(self, task) -> list[int]:
        """Where prologue_calls' entries sit in the task's prologue. It depends on the names alone,
        so it is the same for every task of an op (tasks._lower_op expands names, not boxes)."""
        chain = [p for p, _ in task.prologue] + [task.op]
        out = []
        absorbed = self.absorbed[task.op]["ops"] if task.op in self.absorbed else ()
        for i, (pname, _) in enumerate(task.prologue):
            if pname in absorbed:      # the attention's body does these (attention_inputs)
                continue
            if pname in self.onchip_norms:
                produced = self.g.op(pname).outputs[0]
                readers = [c for c in chain[i + 1:] if produced in self.g.op(c).inputs]
                if readers and all(self.onchip.get(c) is not None and self.onchip[c].name == pname for c in readers):
                    continue
            out.append(i)
        return out

    # -- one device function per op, over [lo, hi) along its tile axis ----------------------
    def impl_body(self, op: Op, code: str) -> tuple[str, list[int]]:
        """An agent's task body for op (the `impl` edit) inside the contract IMPL_CONTRACT states: its
        checked tokens (impl_guard.emit_body), given views of its tensors that check every index
        (in0.. read-only within the tensor, out within the task's tile [lo, hi) along the tile axis,
        sm within SMEM_LIMIT), their shapes as constants, and the tile. MK_IMPL_FID stands for the
        function's id until _emit_once knows it."""
        from megakernel_gym.compiler.impl_guard import ImplBodyError, emit_body
        try:
            checked = emit_body(code)
        except ImplBodyError as e:
            raise CodegenError(f"impl {op.name}: {e}") from None
        axis = self.plan.tg.tiling[op.name][0] if op.name in self.plan.tg.tiling else 0
        self._args = []
        self.smem = SMEM_LIMIT           # the contract promises the body all of it
        decls = []
        for i, t in enumerate(op.inputs):
            spec = self.g.tensors[t]
            ct, shape = CTYPES[spec.dtype], list(spec.shape)
            decls.append(f"  const MkIn<{ct}, {_numel(shape)}ull> in{i}{{(const {ct}*){self.ptr(t)}, MK_IMPL_FID}};"
                         f"   // {t} {shape} {spec.dtype}")
            decls.append(f"  const long long in{i}_shape[{max(1, len(shape))}] = {{{', '.join(map(str, shape)) or '1'}}};")
        for i, t in enumerate(op.outputs):
            spec = self.g.tensors[t]
            ct, shape, name = CTYPES[spec.dtype], list(spec.shape), "out" if i == 0 else f"out{i}"
            n = _numel(shape)
            if i == 0 and shape:    # the task's tile: [lo, hi) along the tile axis
                inner, dim, lo, hi = _numel(shape[axis + 1:]), shape[axis], "lo", "hi"
            else:                   # a second output: the whole tensor
                inner, dim, lo, hi = 1, n, "0", str(n)
            decls.append(f"  const MkOut<{ct}, {n}ull, {inner}ull, {dim}ull> {name}{{{self.ptr(t)}, {lo}, {hi}, "
                         f"MK_IMPL_FID}};   // {t} {shape} {spec.dtype}")
            decls.append(f"  const long long {name}_shape[{max(1, len(shape))}] = "
                         f"{{{', '.join(map(str, shape)) or '1'}}};")
        text = (f"// impl {op.name} ({op.kind}, tiled along axis {axis}): the agent's task body, as checked tokens\n"
                + "\n".join(decls) + f"\n  const int tile_axis = {axis};\n"
                + "  (void)tile_axis;\n" + "".join(f"  (void)in{i}_shape;\n" for i in range(len(op.inputs)))
                + "".join(f"  (void)in{i};\n" for i in range(len(op.inputs)))
                + "  (void)out_shape;\n  (void)out;\n  float* const mk_sm_base = sm;\n  {\n"
                + f"    const MkSm<{SMEM_LIMIT // 4}ull> sm{{mk_sm_base, MK_IMPL_FID}};\n    (void)sm;\n"
                + f"    // <<< impl {op.name}\n" + textwrap.indent(checked, "    ") + f"\n    // >>> impl {op.name}\n  }}\n")
        return text, [self.slots[b] for b in self._args]

    def op_body(self, op: Op) -> tuple[str, list[int]]:
        """(the op's function body over [lo, hi) along its tile axis, the slots of its tensors)."""
        axis = self.plan.tg.tiling[op.name][0] if op.name in self.plan.tg.tiling else 0
        body = getattr(self, f"_{op.kind}", None)
        if body is None:
            raise CodegenError(f"op {op.name}: primitive {op.kind!r} is not emitted yet")
        self._args: list[str] = []
        self._kind = op.kind
        self._open = self.open_ops is None or op.name in self.open_ops
        self._hold = next((str(n) if n == 0 else f"min({n}, WS_STAGES - 1)" for pat, n in self.hold_ops
                           if re.search(pat, op.name)), "WS_HOLD")
        prods = self.epilogues.get(op.name)
        text = (f"// {op.kind}{' ' + str(op.attrs) if op.attrs else ''}, tiled along axis {axis}"
                + (f", with its producers {', '.join(p.kind for p in prods)} as one call\n"
                   + self._fused_epilogue(op, prods) if prods else "\n" + body(op, axis)))
        return text, [self.scratch[b][0] if b in self.scratch else self.slots[b] for b in self._args]

    def _box_loop(self, shape, axis: int, inner: str) -> str:
        """Every element of the box [lo, hi) along `axis` (full elsewhere), coordinates c0..cN."""
        dims = [f"{d}" for d in shape]
        dims[axis] = "(hi - lo)"
        n = " * ".join(dims) or "1"
        lines = [f"  const int n = {n};", "  for (int e = threadIdx.x; e < n; e += MK_NT) {",
                 "    int r = e;"]
        for i in reversed(range(len(shape))):
            lines.append(f"    const int c{i} = r % {dims[i]}{' + lo' if i == axis else ''}; r /= {dims[i]};")
        lines.append(textwrap.indent(inner, "    "))
        lines.append("  }")
        return "\n".join(lines) + "\n"

    def _index(self, shape, coords: list[str]) -> str:
        return " + ".join(f"(long long)({c}) * {s}" for c, s in zip(coords, _strides(shape))) or "0"

    def _elementwise(self, op: Op, axis: int) -> str:
        out = op.outputs[0]
        oshape = self.g.tensors[out].shape
        tree = parse_expr(op.attrs["expr"], len(op.inputs))
        loads = []
        for i, t in enumerate(op.inputs):
            ishape = self.g.tensors[t].shape
            off = len(oshape) - len(ishape)
            coords = ["0" if ishape[k] == 1 and oshape[k + off] != 1 else f"c{k + off}" for k in range(len(ishape))]
            loads.append(f"const float v_{chr(97 + i)} = {self.load(t, self._index(ishape, coords))};")
        inner = "\n".join(loads) + "\n" + self.store(out, self._index(oshape, [f"c{i}" for i in range(len(oshape))]),
                                                       _c_expr(tree))
        return self._box_loop(oshape, axis, inner)

    def _embedding(self, op: Op, axis: int) -> str:
        ids, table = op.inputs
        out = op.outputs[0]
        oshape = self.g.tensors[out].shape
        cols = self.g.tensors[table].shape[1]
        if axis != len(oshape) - 1:
            raise CodegenError(f"op {op.name}: embedding tiled along axis {axis}; only the last axis is emitted")
        ids_idx = self._index(oshape[:-1], [f"c{i}" for i in range(len(oshape) - 1)]) if len(oshape) > 1 else "0"
        c = f"c{len(oshape) - 1}"
        inner = (f"const long long row = {self.load(ids, ids_idx)};\n"
                 + self.store(out, self._index(oshape, [f"c{i}" for i in range(len(oshape))]),
                              self.load(table, f"row * {cols} + {c}")))
        return self._box_loop(oshape, axis, inner)

    def _matmul(self, op: Op, axis: int) -> str:
        x, w = op.inputs[0], op.inputs[1]
        out = op.outputs[0]
        oshape = self.g.tensors[out].shape
        if axis != len(oshape) - 1:
            raise CodegenError(f"op {op.name}: matmul tiled along axis {axis}; only output columns are emitted")
        k = self.g.tensors[x].shape[-1]
        n_total = oshape[-1]
        m = 1
        for d in oshape[:-1]:
            m *= d
        nk = op.attrs.get("w_layout", "NK") == "NK"
        epv = EPV.get(self.g.tensors[w].dtype, 0)   # weight elements per 16-byte load
        if _streams(self.g, op):
            if self.weights == "smem":
                self.bulk_ops.add(op.name)
                return self._matmul_ring(op, m, k, n_total, epv)
            return self._matmul_streamed(op, m, k, n_total, epv)
        wl = f"(long long)n * {k} + kk" if nk else f"(long long)kk * {n_total} + n"
        bias = (f" + {self.load(op.inputs[2], 'n')}" if op.attrs.get("bias") else "")
        return (f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                f"  const int pairs = {m} * (hi - lo);\n"
                f"  for (int p = warp; p < pairs; p += MK_NT / 32) {{\n"
                f"    const int mm = p / (hi - lo), n = lo + p % (hi - lo);\n"
                f"    float acc = 0.f;\n"
                f"    for (int kk = lane; kk < {k}; kk += 32)\n"
                f"      acc += {self.load(x, f'(long long)mm * {k} + kk')} * {self.load(w, wl)};\n"
                f"    acc = warp_sum(acc);\n"
                f"    if (lane == 0) {{ {self.store(out, f'(long long)mm * {n_total} + n', 'acc' + bias)} }}\n"
                f"  }}\n")

    def _matmul_streamed(self, op: Op, m: int, k: int, n_total: int, epv: int) -> str:
        """Decode matvec at memory speed: x staged once in shared memory as float; each warp walks
        its steps (R weight rows x a chunk of 32*U 16-byte vectors) with two register buffers, so
        the next step's loads (ld.global.nc, no L1 allocation: weights are read once) are in flight
        while the current one is multiplied, and the load pipe never drains between rows."""
        w, out = op.inputs[1], op.outputs[0]
        kv = k // epv                                    # 16-byte vectors per weight row
        u = 1                                            # vectors per lane per chunk: 8, or what divides
        while u < 8 and kv % (64 * u) == 0:
            u *= 2
        r = max(1, 8 // u)
        nc = -(-kv // (32 * u))                          # chunks per row
        self.smem = max(self.smem, m * k * 4)
        bias = (f" + {self.load(op.inputs[2], 'n')}" if op.attrs.get("bias") else "")
        dot, xload = _dot_exprs(epv, "B[i][j]")
        guard = "" if kv % (32 * u) == 0 else f"if (c < {kv}) "

        def load(buf: str, st: str) -> str:
            return (f"      {{\n"
                    f"        const int n0 = lo + (warp + ({st}) / {nc} * {WARPS}) * {r}, c0 = ({st}) % {nc} * {32 * u};\n"
                    f"#pragma unroll\n"
                    f"        for (int i = 0; i < {r}; ++i)\n"
                    f"#pragma unroll\n"
                    f"          for (int j = 0; j < {u}; ++j) {{\n"
                    f"            const int c = c0 + j * 32 + lane;\n"
                    f"            {buf}[i][j] = (n0 + i < hi && c < {kv}) ? ld_stream(W + (long long)(n0 + i) * {kv} + c)"
                    f" : make_uint4(0u, 0u, 0u, 0u);\n"
                    f"          }}\n"
                    f"      }}\n")

        # rows the ring streams as packed stages of several segments sum each segment (warp_sum) and
        # then the segments in order; so does this path, for the same bits
        per_seg = ring_packed(kv * 16) and nc > 1

        store = self.store(out, f"(long long)mm * {n_total} + n", "v" + bias)
        if per_seg:   # every chunk starts a new sum; each chunk's warp sum adds to the row's total
            reset = ("#pragma unroll\n"
                     "        for (int i = 0; i < {r}; ++i) for (int mm = 0; mm < {m}; ++mm) "
                     "{{ acc[i][mm] = 0.f; if (ci == 0) tot[i][mm] = 0.f; }}\n").format(r=r, m=m)
            finish = (f"              tot[i][mm] += warp_sum(acc[i][mm]);\n"
                      f"              const float v = tot[i][mm];\n"
                      f"              if (ci == {nc - 1} && lane == 0 && n < hi) {{ {store} }}\n")
        else:         # a row's chunks add up in each lane; one warp sum at its last chunk
            reset = (f"        if (ci == 0)\n"
                     f"#pragma unroll\n"
                     f"          for (int i = 0; i < {r}; ++i) for (int mm = 0; mm < {m}; ++mm) acc[i][mm] = 0.f;\n")
            finish = (f"              if (ci != {nc - 1}) continue;\n"
                      f"              const float v = warp_sum(acc[i][mm]);\n"
                      f"              if (lane == 0 && n < hi) {{ {store} }}\n")

        def compute(buf: str, st: str) -> str:
            return (f"      {{\n"
                    f"        const int n0 = lo + (warp + ({st}) / {nc} * {WARPS}) * {r}, ci = ({st}) % {nc};\n"
                    + reset +
                    f"#pragma unroll\n"
                    f"        for (int j = 0; j < {u}; ++j) {{\n"
                    f"          const int c = ci * {32 * u} + j * 32 + lane;\n"
                    f"          {guard}{{\n"
                    f"#pragma unroll\n"
                    f"            for (int mm = 0; mm < {m}; ++mm) {{\n"
                    f"              const float4* X4 = (const float4*)(xs + mm * {k});\n"
                    f"              {xload}\n"
                    f"#pragma unroll\n"
                    f"              for (int i = 0; i < {r}; ++i) acc[i][mm] += {dot.replace('B[', buf + '[')};\n"
                    f"            }}\n"
                    f"          }}\n"
                    f"        }}\n"
                    f"#pragma unroll\n"
                    f"        for (int i = 0; i < {r}; ++i)\n"
                    f"#pragma unroll\n"
                    f"          for (int mm = 0; mm < {m}; ++mm) {{\n"
                    f"              const int n = n0 + i;\n"
                    + finish +
                    f"          }}\n"
                    f"      }}\n")

        # the first weight loads go out before the input vector is staged: their memory latency and
        # the vector's (and a fused norm's reduction) overlap instead of adding up
        return (f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                f"  const uint4* W = (const uint4*){self.ptr(w)};\n"
                f"  const int mine = hi - lo - warp * {r};   // rows from this warp's first onward\n"
                f"  const int steps = mine > 0 ? (mine + {WARPS * r - 1}) / {WARPS * r} * {nc} : 0;\n"
                f"  float acc[{r}][{m}];\n"
                + (f"  float tot[{r}][{m}];\n" if per_seg else "") +
                f"  uint4 a[{r}][{u}], b[{r}][{u}];\n"
                f"  if (steps > 0) {{\n" + load("a", "0") + "  }\n"
                + self._stage_x(op, m, k) +
                f"  for (int st = 0; st < steps; st += 2) {{\n"
                f"    if (st + 1 < steps) {{\n" + load("b", "st + 1") + "    }\n"
                + compute("a", "st") +
                f"    if (st + 2 < steps) {{\n" + load("a", "st + 2") + "    }\n"
                f"    if (st + 1 < steps) {{\n" + compute("b", "st + 1") + "    }\n"
                f"  }}\n")

    def _stage_combined(self, name: str, offset: str, count, dst: str, planes: int = 0) -> str:
        """`stage` of a split attention's output that its parts never stored (self.deferred): each
        4 elements combined from every part's partial row, max and sum, in the order and arithmetic
        of the last part's combine (_split_combine), and rounded to the output's dtype as its store
        would, so the reader gets the same values."""
        out = self.g.op(name).outputs[0]
        _, _, d = self.g.tensors[out].shape
        split, ps = self.splits[name], self.part_stride(d)
        if not isinstance(count, int) or count % 4:
            raise CodegenError(f"op {name}: its readers stage {count} elements, not whole float4s")
        r = "bf2f(f2bf({}))" if self.g.tensors[out].dtype == "bfloat16" else "{}"
        return (f"  {{\n"
                f"    const float* part_out = {self.scratch_ptr(name, 'float')} + {self.arrival_words(name)};\n"
                f"    for (int v = threadIdx.x; v < {count // 4}; v += MK_NT) {{\n"
                f"      const long long e = ({offset}) + 4LL * v, bh = e / {d};\n"
                f"      const float* P = part_out + bh * {split * ps} + e % {d};\n"
                f"      const float* M = part_out + bh * {split * ps} + {d};\n"
                f"      float4 ov[{split}]; float2 ml[{split}];\n"
                f"#pragma unroll\n"
                f"      for (int p = 0; p < {split}; ++p) {{ ov[p] = __ldcg((const float4*)(P + p * {ps})); "
                f"ml[p] = __ldcg((const float2*)(M + p * {ps})); }}\n"
                f"      float mx = -INFINITY;\n"
                f"#pragma unroll\n"
                f"      for (int p = 0; p < {split}; ++p) mx = fmaxf(mx, ml[p].x);\n"
                f"      float lsum = 0.f, o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;\n"
                f"#pragma unroll\n"
                f"      for (int p = 0; p < {split}; ++p) {{\n"
                f"        const float w = ml[p].x == -INFINITY ? 0.f : __expf(ml[p].x - mx);\n"
                f"        lsum += w * ml[p].y; o0 += w * ov[p].x; o1 += w * ov[p].y; o2 += w * ov[p].z; o3 += w * ov[p].w;\n"
                f"      }}\n"
                + (f"      *(float4*)(({dst}) + mk_xp(4 * v, {planes})) = make_float4("
                   if planes else f"      ((float4*)({dst}))[v] = make_float4(") +
                f"{r.format('o0 / lsum')}, {r.format('o1 / lsum')}, "
                f"{r.format('o2 / lsum')}, {r.format('o3 / lsum')});\n"
                f"    }}\n"
                f"  }}\n")

    def _x_half(self, op: Op, m: int, k: int, epv: int) -> bool:
        """Whether this ring-fed matmul keeps its input vector in shared memory as bf16 (unchanged
        bits, half the bytes): a decode vector (m = 1) of a bf16 tensor of its own (not a fused
        norm's, not a split attention's parts) against bf16 weights in packed stages, where each
        lane reads its x vector from shared memory with each weight vector (_ring_rows). The 1B
        step's down_proj stages 8192 values: 32 KB as float, its block's largest scratch."""
        return (self.x_bf16 and m == 1 and epv == 8 and ring_packed(k // epv * 16) and op.name not in self.onchip
                and self.g.tensors[op.inputs[0]].dtype == "bfloat16" and self.base[op.inputs[0]] not in self.deferred)

    def _matmul_ring(self, op: Op, m: int, k: int, n_total: int, epv: int) -> str:
        """Decode matvec fed from the block's weight ring: the task's weight rows arrive in shared
        memory by bulk copy (cp.async.bulk, completing on an mbarrier per stage), issued in queue
        order as soon as a stage is free, so a task's first stages land while it still waits for
        its inputs (and while the task before it runs). Each stage holds one WS_SEG-byte segment
        of a row per warp: packed (ring_packed: WS_STAGE contiguous bytes, WARPS / segments rows,
        x in registers) or one segment of each of WARPS rows, multiplied with x from shared memory.
        The stage count per call is the one ws_at walks for the same rows: ceil(rows / rows per
        stage) packed, ceil(rows / WARPS) row groups x segments per row otherwise."""
        half = self._x_half(op, m, k, epv)
        self.smem = max(self.smem, 4 * _ring_scratch(m, k, half)[1])
        return (f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                + self._stage_x(op, m, k, again=op.name in self.claim_ops, split=_x_split(m, epv), half=half) +
                f"  unsigned g = ws.done;\n"
                + self._ring_rows(op, m, k, n_total, epv) +
                f"  if (threadIdx.x == 0) ws.done = g;     // published by the barrier after the call\n")

    def _ring_rows(self, op: Op, m: int, k: int, n_total: int, epv: int, keep: str = "", first: bool = True,
                   last: bool = True) -> str:
        """The stage loop of a ring-fed matmul over its rows [lo, hi), from ring stage g on (g ends
        past its last stage). Each row's value is stored to the op's output; with `keep` (a float*
        in shared memory) also kept there at keep[n - lo], as the output dtype rounds it, for a
        fused consumer's epilogue. Probes (emit_cuda probes=True): when its first stage is in (if
        `first`: the task's first ring-fed rows) and when its last row is done.

        Rows of whole WS_SEG segments, 1, 2, 4 or 8 of them (ring_packed), come as packed stages:
        WS_STAGE contiguous bytes of the weight, so warp w always multiplies segment w % segments
        of a row, always at the same columns of x: a decode vector (m = 1) is read from shared
        memory into registers once per call, and each stage reads only its weights from shared
        memory (x read per stage, twice the weight bytes with a 2-way bank conflict, cost about as
        much as streaming the stage from memory); as bf16 (_x_half) it is read with each weight
        vector, the same bytes as the weights and no bank conflict. A row split over warps is summed per segment
        (warp_sum) and the segments in order, by the last warp after the stage's barrier."""
        out = op.outputs[0]
        half = self._x_half(op, m, k, epv)               # x in shared memory as bf16
        kv = k // epv                                    # 16-byte vectors per weight row
        segv = WS_SEG // 16                              # vectors per segment
        ncs = -(-kv // segv)                             # segments per row
        u = -(-min(kv, segv) // 32)                      # vectors per lane per segment
        bias = (f" + {self.load(op.inputs[2], 'n')}" if op.attrs.get("bias") else "")
        dot, xload = _dot_exprs(epv, "wv")
        if _x_split(m, epv):
            xload = f"const float4 xa = X4[c], xb = X4[{kv} + c];"
        value = "v" + bias
        store = True
        if keep:
            rounded = "bf2f(f2bf(o))" if self.g.tensors[out].dtype == "bfloat16" else "o"
            kept = f" const float o = {value}; {keep}[mm * (hi - lo) + n - lo] = {rounded}; "
            value = "o"
            store = not self.kept_only(out)
        else:
            kept = " "
        emit = f"{kept}{self.store(out, f'(long long)mm * {n_total} + n', value) if store else ''} "
        sum_emit = (f"#pragma unroll\n"
                    f"        for (int mm = 0; mm < {m}; ++mm) {{\n"
                    f"          const float v = warp_sum(acc[mm]);\n"
                    f"          if (lane == 0) {{{emit}}}\n"
                    f"        }}\n")
        x_smem = (f"\n#pragma unroll\n"
                  f"          for (int mm = 0; mm < {m}; ++mm) {{\n"
                  f"            const float4* X4 = (const float4*)(xs + mm * {k});\n"
                  f"            {xload}\n"
                  f"            acc[mm] += {dot};\n"
                  f"          }}")
        zero = f"#pragma unroll\n    for (int mm = 0; mm < {m}; ++mm) acc[mm] = 0.f;\n"
        if not ring_packed(kv * 16):   # one segment of each of WARPS rows: a row's segments in turn, one warp
            return _ring_loop(m, segv, kv, u, first, nst=f"(hi - lo + {WARPS - 1}) / {WARPS} * {ncs}", head="",
                              row=f"const int cs = s % {ncs}, n = lo + s / {ncs} * {WARPS} + warp;",
                              reset=f"    if (cs == 0) {{\n{zero}    }}\n", mac=x_smem,
                              done=f"      if (cs == {ncs - 1}) {{\n{sum_emit}      }}\n", combine="",
                              producer=self.producer, last=last, hold=self._hold)
        # packed: WARPS / ncs whole rows; warp w on segment w % ncs of row w / ncs, always the same columns
        rps = WARPS // ncs
        head = ""
        if m == 1 and half:   # x as bf16 in shared memory, read with each weight vector (16 contiguous bytes a
            # lane, no bank conflict); held in registers instead (as bf16 or converted once per call), the
            # 1B expert's down_proj made ptxas spill
            head = "  const uint4* X8 = (const uint4*)xs;   // x as bf16: vector c is its 8 values at c\n"
        elif m == 1:   # x at this lane's columns in registers, read from shared memory once per call
            nx = u * (2 if epv == 8 else 1)
            grab = "xr[2 * j] = X4[2 * c]; xr[2 * j + 1] = X4[2 * c + 1];" if epv == 8 else "xr[j] = X4[c];"
            none = ("xr[2 * j] = xr[2 * j + 1] = make_float4(0.f, 0.f, 0.f, 0.f);" if epv == 8
                    else "xr[j] = make_float4(0.f, 0.f, 0.f, 0.f);")
            head = (f"  float4 xr[{nx}];   // x at this warp's columns: the same in every stage\n"
                    f"  {{\n"
                    f"    const float4* X4 = (const float4*)xs;\n"
                    f"#pragma unroll\n"
                    f"    for (int j = 0; j < {u}; ++j) {{\n"
                    f"      const int c = cs * {segv} + j * 32 + lane;\n"
                    f"      if (c < {kv}) {{ {grab} }} else {{ {none} }}\n"
                    f"    }}\n"
                    f"  }}\n")
        mac = ("acc[0] += dot_bf16x8_x(wv, X8[c]);" if half else
               ("acc[0] += dot_bf16x8(wv, xr[2 * j], xr[2 * j + 1]);" if epv == 8 else "acc[0] += dot_f32x4(wv, xr[j]);")
               if m == 1 else x_smem)
        if ncs == 1:       # a row per warp: its lane 0 has the row's value
            done, combine = sum_emit, ""
        else:              # a row per ncs warps: each segment's sum to pbuf, the last warp adds them in order
            # two buffers, by the ring stage's parity (not the call's: a fused epilogue's next matmul starts
            # writing while the last warp may still add up the previous one's last stage)
            head = f"  float* pbuf = sm + {_ring_scratch(m, k, half)[0]};   // per ring stage (two alternate): each warp's segment sums\n" + head
            done = (f"#pragma unroll\n"
                    f"        for (int mm = 0; mm < {m}; ++mm) {{\n"
                    f"          const float v = warp_sum(acc[mm]);\n"
                    f"          if (lane == 0) pbuf[((g & 1) * {m} + mm) * {WARPS} + warp] = v;\n"
                    f"        }}\n")
            def row_sum(row: str) -> str:   # row `row` of the stage (n): its segments' sums, in segment order
                return (f"        if (n < hi) {{\n"
                        f"          float v = 0.f;\n"
                        f"#pragma unroll\n"
                        f"          for (int c = 0; c < {ncs}; ++c) v += pbuf[((g & 1) * {m} + mm) * {WARPS} + {row} * {ncs} + c];\n"
                        f"          {emit}\n"
                        f"        }}\n")
            if self.producer == "warp":   # the row's own warps meet (named barrier 2 + its row), its last adds up
                combine = (f"    asm volatile(\"bar.sync %0, {32 * ncs};\" :: \"r\"(2 + warp / {ncs}) : \"memory\");"
                           f"   // the row's {ncs} warps: their segment sums are in\n"
                           f"    if (warp % {ncs} == {ncs - 1})   // the row: its segments' sums, in segment order\n"
                           f"      for (int mm = lane; mm < {m}; mm += 32) {{\n"
                           f"        const int n = lo + s * {rps} + warp / {ncs};\n"
                           + row_sum(f"warp / {ncs}") +
                           f"      }}\n")
            else:
                combine = (f"    if (warp == {WARPS - 1})   // the stage's rows: their segments' sums, in segment order\n"
                           f"      for (int e = lane; e < {rps * m}; e += 32) {{\n"
                           f"        const int mm = e / {rps}, n = lo + s * {rps} + e % {rps};\n"
                           + row_sum(f"e % {rps}") +
                           f"      }}\n")
        return _ring_loop(m, segv, kv, u, first, nst=f"(hi - lo + {rps - 1}) / {rps}, cs = warp % {ncs}", head=head,
                          row=f"const int n = lo + s * {rps} + warp / {ncs};", reset=zero, mac=mac,
                          done=done, combine=combine, producer=self.producer, last=last, hold=self._hold)

    def kept_only(self, tensor: str) -> bool:
        """Whether a fused epilogue's matmul output need not reach memory at all: an activation
        that no op but its one consumer reads (that consumer takes it from shared memory) and that
        is no graph output. Storing it anyway measured 5-20 us of the 1B step on an H100."""
        readers = [o.name for o in self.g.ops if tensor in o.inputs]
        spec = self.g.tensors[tensor]
        return len(readers) == 1 and tensor not in self.g.outputs and spec.kind not in ("buffer", "weight", "input")

    def epilogue_producers(self, op: Op) -> list[Op] | None:
        """The matmuls an elementwise op computes in its own task, when its fusion can be a real
        epilogue (weights="smem"): every fused producer of each of its tasks is a ring-fed matmul
        over exactly the task's columns, all reading one input (through the same on-chip norm, or
        none), each output shaped like the op's and feeding it directly. Then one call stages
        the vector once, runs the matmuls' rows off the ring and keeps their values in shared
        memory, and the op's own inputs are loaded before the vector; its output is computed from
        there, with no trip through memory between the matmuls and the op. None otherwise."""
        if self.weights != "smem" or op.kind != "elementwise" or op.name not in self.plan.tg.by_op:
            return None
        oshape = self.g.tensors[op.outputs[0]].shape
        if len(oshape) != 2 or self.plan.tg.tiling[op.name][0] != 1:
            return None
        if any(self.g.tensors[t].shape != oshape for t in op.inputs):
            return None
        # every task of the op calls the same producers (_prologue_kept): the first task's calls
        # name them, and each task's own boxes are checked against its tile
        tasks = self.plan.tg.tasks
        ids = self.plan.tg.by_op[op.name]
        kept = self._prologue_kept(tasks[ids[0]])
        if not kept:
            return None
        names = [tasks[ids[0]].prologue[i][0] for i in kept]
        axis, _, size = self.plan.tg.tiling[op.name]
        last = len(oshape) - 1
        for tid in ids:
            task = tasks[tid]
            span = (task.tile * size, (task.tile + 1) * size) if axis == last else (0, oshape[last])   # tile_box's
            if any(task.prologue[i][1][-1] != span for i in kept):
                return None
        prods = [self.g.op(n) for n in names]
        if any(p.inputs[0] != prods[0].inputs[0] for p in prods):
            return None
        norms = {self.onchip[p.name].name if p.name in self.onchip else None for p in prods}
        if len(norms) != 1 or len({p.outputs[0] for p in prods}) != len(prods):
            return None
        for p in prods:
            if (p.kind != "matmul" or p.outputs[0] not in op.inputs or p.attrs.get("bias")
                    or self.g.tensors[p.outputs[0]].shape != oshape or not _streams(self.g, p)):
                return None
        return prods

    def _fused_epilogue(self, op: Op, prods: list[Op]) -> str:
        """The elementwise op with its producer matmuls (epilogue_producers) in one body."""
        first = prods[0]
        k = self.g.tensors[first.inputs[0]].shape[-1]
        epv = EPV.get(self.g.tensors[first.inputs[1]].dtype, 0)
        m, n_total = self.g.tensors[op.outputs[0]].shape
        tile = self.plan.tg.tiling[op.name][2]
        per = -(-m * tile // THREADS)                   # outputs per thread
        half = self._x_half(first, m, k, epv)
        keep_at = _ring_scratch(m, k, half)[1]          # past x, the norm's reduction scratch and pbuf
        self.smem = max(self.smem, 4 * (keep_at + len(prods) * m * tile))
        for p in prods:
            self.bulk_ops.add(p.name)
        tree = parse_expr(op.attrs["expr"], len(op.inputs))
        at = f"(long long)(e / (hi - lo)) * {n_total} + lo + e % (hi - lo)"   # output e of the tile, row-major
        pre, vals = [], []
        for i, t in enumerate(op.inputs):
            v = f"v_{chr(97 + i)}"
            j = next((j for j, p in enumerate(prods) if p.outputs[0] == t), None)
            if j is None:
                pre.append(f"  float {v}[{per}];\n"
                           f"#pragma unroll\n"
                           f"  for (int r = 0; r < {per}; ++r) {{ const int e = threadIdx.x + r * {THREADS}; "
                           f"{v}[r] = e < {m} * (hi - lo) ? {self.load(t, at)} : 0.f; }}\n")
                vals.append(f"const float {v}_ = {v}[r];")
            else:
                vals.append(f"const float {v}_ = kept[{j * m} * (hi - lo) + e];")
        expr = re.sub(r"\bv_([a-z])\b", r"v_\1_", _c_expr(tree))
        body = (f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                + ("  // the op's other inputs first: their loads are in flight while x is staged\n" if pre else "")
                + "".join(pre) + self._stage_x(first, m, k, again=op.name in self.claim_ops, split=_x_split(m, epv),
                                               half=half) +
                f"  float* kept = sm + {keep_at};   // the matmuls' rows, as their outputs round them\n"
                f"  unsigned g = ws.done;\n")
        for j, p in enumerate(prods):
            body += f"  // {p.name.rsplit('.', 1)[-1]}: rows [lo, hi)\n" + self._ring_rows(
                p, m, k, n_total, epv, keep=f"(kept + {j * m} * (hi - lo))" if j else "kept", first=j == 0,
                last=j == len(prods) - 1)
        body += (f"  if (threadIdx.x == 0) ws.done = g;\n"
                 f"  MK_SYNC();\n"
                 f"#pragma unroll\n"
                 f"  for (int r = 0; r < {per}; ++r) {{\n"
                 f"    const int e = threadIdx.x + r * {THREADS};\n"
                 f"    if (e < {m} * (hi - lo)) {{\n"
                 f"      {' '.join(vals)}\n"
                 f"      {self.store(op.outputs[0], at, expr)}\n"
                 f"    }}\n"
                 f"  }}\n")
        return body

    def _open_text(self) -> str:
        """A matmul whose task has stages to open (an `ahead` cap): once its input is staged, its ring
        stages go at their own cap (WS_AHEAD); any other body says nothing, so its tasks pay nothing."""
        return "  MK_OPEN();   // its input is on chip: its ring stages go at their own cap (WS_AHEAD)\n" \
            if self._open else ""

    def _stage_x(self, op: Op, m: int, k: int, again: bool = False, split: bool = False, half: bool = False) -> str:
        """The matmul's input vector(s) into shared memory as float. When the vector is a fused
        rmsnorm's output (self.onchip), the norm's input is staged instead and normalized in place
        (rounded to the norm's output dtype, as the norm's own task would store it): the norm costs
        a block reduction in each consumer task instead of a task and a dependency hop of its own.
        `again`: a claimed op's call (emit_cuda claim), which skips this for every tile after its
        task's first (the vector is still in shared memory). `half`: x as bf16 (_x_half)."""
        norm = self.onchip.get(op.name)
        guard = ("  if (part != MK_CLAIM_AGAIN) {   // a claimed tile after the task's first keeps x\n", "  }\n") \
            if again else ("", "")
        planes = k if split else 0
        if norm is None:
            return ("  float* xs = sm;\n" + guard[0] + self.stage(op.inputs[0], "0", m * k, "xs", planes=planes, half=half)
                    + "  MK_SYNC();\n  MK_PROBE(PROBE_INPUT);\n" + self._open_text() + guard[1])
        self.smem = max(self.smem, m * k * 4 + 4 * WARPS)
        per = -(-k // THREADS)          # norm weight elements per thread, loaded before the vector is staged
        has_w = len(norm.inputs) > 1
        scaled = "xs[i] * inv" + (" * wr[j]" if has_w else "")
        if self.g.tensors[norm.outputs[0]].dtype == "bfloat16":
            scaled = f"bf2f(f2bf({scaled}))"
        wload = (f"  float wr[{per}];\n"
                 f"#pragma unroll\n"
                 f"  for (int j = 0; j < {per}; ++j) {{ const int c = threadIdx.x + j * {THREADS}; "
                 f"wr[j] = c < {k} ? {self.load(norm.inputs[1], 'c')} : 0.f; }}\n") if has_w else ""
        col = (lambda c: f"mk_xp({c}, {k})") if planes else (lambda c: c)   # noqa: E731  (column c's place)
        return (f"  float* xs = sm; float* red = sm + {m * k};   // the fused rmsnorm, computed here on chip\n"
                + guard[0] + wload + self.stage(norm.inputs[0], "0", m * k, "xs", planes=planes) +
                f"  MK_SYNC();\n"
                f"  for (int mm = 0; mm < {m}; ++mm) {{\n"
                f"    float ss = 0.f;\n"
                f"    for (int c = threadIdx.x; c < {k}; c += MK_NT) ss += xs[mm * {k} + {col('c')}] * xs[mm * {k} + {col('c')}];\n"
                f"    const float inv = rsqrtf(block_sum(ss, red) / {k}.f + {float(norm.attrs['eps'])!r}f);\n"
                f"#pragma unroll\n"
                f"    for (int j = 0; j < {per}; ++j) {{ const int c = threadIdx.x + j * {THREADS}, i = mm * {k} + {col('c')}; "
                f"if (c < {k}) xs[i] = {scaled}; }}\n"
                f"  }}\n"
                f"  MK_SYNC();\n"
                f"  MK_PROBE(PROBE_INPUT);\n"
                + self._open_text() + guard[1])

    def _rmsnorm(self, op: Op, axis: int) -> str:
        """A row (and the weight) staged in shared memory in batched 16-byte loads, a block-wide sum
        of squares, then the scaled row written from shared memory."""
        x = op.inputs[0]
        out = op.outputs[0]
        shape = self.g.tensors[out].shape
        d = shape[-1]
        if axis != 0 or len(shape) != 2:
            raise CodegenError(f"op {op.name}: rmsnorm over {list(shape)} tiled along {axis}: only 2-D rows")
        has_w = len(op.inputs) > 1
        self.smem = max(self.smem, 4 * (2 * d + WARPS))
        vec = d % 8 == 0
        return (f"  float* xs = sm; float* ws = sm + {d}; float* red = sm + {2 * d};\n"
                + (self.stage(op.inputs[1], "0", d, "ws") if has_w else "") +
                f"  for (int row = lo; row < hi; ++row) {{\n"
                + self.stage(x, f"(long long)row * {d}", d, "xs", vec_ok=vec) +
                f"    MK_SYNC();\n"
                f"    float ss = 0.f;\n"
                f"    for (int c = threadIdx.x; c < {d}; c += MK_NT) ss += xs[c] * xs[c];\n"
                f"    const float total = block_sum(ss, red);\n"
                f"    const float inv = rsqrtf(total / {d}.f + {float(op.attrs['eps'])!r}f);\n"
                f"    for (int c = threadIdx.x; c < {d}; c += MK_NT)\n"
                f"      {self.store(out, f'(long long)row * {d} + c', 'xs[c] * inv' + (' * ws[c]' if has_w else ''))}\n"
                f"    MK_SYNC();\n"
                f"  }}\n")

    def _moe_route(self, op: Op, axis: int) -> str:
        """One expert's router weight per row (ops.moe_route_ref): one thread per row takes the
        softmax of the E logits in float32, picks the top_k by repeated argmax (the lowest index on
        a tie), and writes the expert's probability over the top_k's sum, or 0."""
        x, out = op.inputs[0], op.outputs[0]
        e_n = self.g.tensors[x].shape[-1]
        k, ex = int(op.attrs["top_k"]), int(op.attrs["expert"])
        if axis != 0:
            raise CodegenError(f"op {op.name}: moe_route tiled along axis {axis}; only rows are emitted")
        if e_n > 64:
            raise CodegenError(f"op {op.name}: moe_route over {e_n} experts; at most 64 are emitted")
        return (f"  for (int row = lo + threadIdx.x; row < hi; row += MK_NT) {{\n"
                f"    float p[{e_n}], mx = -INFINITY, sum = 0.f, top = 0.f, mine = 0.f;\n"
                f"    for (int j = 0; j < {e_n}; ++j) {{ p[j] = {self.load(x, f'(long long)row * {e_n} + j')}; "
                f"mx = fmaxf(mx, p[j]); }}\n"
                f"    for (int j = 0; j < {e_n}; ++j) {{ p[j] = expf(p[j] - mx); sum += p[j]; }}\n"
                f"    for (int j = 0; j < {e_n}; ++j) p[j] /= sum;\n"
                f"    unsigned long long taken = 0ull;\n"
                f"    for (int r = 0; r < {k}; ++r) {{\n"
                f"      int best = -1;\n"
                f"      for (int j = 0; j < {e_n}; ++j)\n"
                f"        if (!((taken >> j) & 1ull) && (best < 0 || p[j] > p[best])) best = j;\n"
                f"      taken |= 1ull << best; top += p[best];\n"
                f"      if (best == {ex}) mine = p[best];\n"
                f"    }}\n"
                f"    {self.store(out, 'row', 'mine / top')}\n"
                f"  }}\n")

    def _layernorm(self, op: Op, axis: int) -> str:
        """Rows of a LayerNorm (GPT-2's): the mean, then the biased variance around it (two block
        sums, as F.layer_norm computes them in float32), then (x - mean) * rsqrt(var + eps) * w + b."""
        x, out = op.inputs[0], op.outputs[0]
        shape = self.g.tensors[out].shape
        d = shape[-1]
        if axis != 0 or len(shape) != 2:
            raise CodegenError(f"op {op.name}: layernorm over {list(shape)} tiled along {axis}: only 2-D rows")
        has_w, has_b = bool(op.attrs.get("weight")), bool(op.attrs.get("bias"))
        w_in = op.inputs[1] if has_w else None
        b_in = op.inputs[1 + has_w] if has_b else None
        self.smem = max(self.smem, 4 * (3 * d + WARPS))
        vec = d % 8 == 0
        value = "(xs[c] - mean) * inv" + (" * ws[c]" if has_w else "") + (" + bs[c]" if has_b else "")
        return (f"  float* xs = sm; float* ws = sm + {d}; float* bs = sm + {2 * d}; float* red = sm + {3 * d};\n"
                f"  (void)ws; (void)bs;\n"
                + (self.stage(w_in, "0", d, "ws") if has_w else "")
                + (self.stage(b_in, "0", d, "bs") if has_b else "") +
                f"  for (int row = lo; row < hi; ++row) {{\n"
                + self.stage(x, f"(long long)row * {d}", d, "xs", vec_ok=vec) +
                f"    MK_SYNC();\n"
                f"    float s1 = 0.f;\n"
                f"    for (int c = threadIdx.x; c < {d}; c += MK_NT) s1 += xs[c];\n"
                f"    const float mean = block_sum(s1, red) / {d}.f;\n"
                f"    float s2 = 0.f;\n"
                f"    for (int c = threadIdx.x; c < {d}; c += MK_NT) {{ const float t = xs[c] - mean; s2 += t * t; }}\n"
                f"    const float inv = rsqrtf(block_sum(s2, red) / {d}.f + {float(op.attrs['eps'])!r}f);\n"
                f"    for (int c = threadIdx.x; c < {d}; c += MK_NT)\n"
                f"      {self.store(out, f'(long long)row * {d} + c', value)}\n"
                f"    MK_SYNC();\n"
                f"  }}\n")

    def _rope(self, op: Op, axis: int) -> str:
        x, pos = op.inputs
        out = op.outputs[0]
        shape = self.g.tensors[out].shape
        if len(shape) != 3:
            raise CodegenError(f"op {op.name}: rope over {list(shape)}: only [batch, heads, head_dim]")
        d = shape[-1]
        half = d // 2
        theta = float(op.attrs["theta"])
        inner = (f"const int i = c2 % {half};\n"
                 f"const float inv_freq = 1.f / powf({theta!r}f, (float)(2 * i) / {d}.f);\n"
                 f"const float ang = (float){self.load(pos, 'c0')} * inv_freq;\n"
                 f"float s, co; sincosf(ang, &s, &co);\n"
                 f"const long long row = ((long long)c0 * {shape[1]} + c1) * {d};\n"
                 f"const float x1 = {self.load(x, 'row + i')}, x2 = {self.load(x, f'row + i + {half}')};\n"
                 + self.store(out, "row + c2", f"c2 < {half} ? x1 * co - x2 * s : x2 * co + x1 * s"))
        return self._box_loop(shape, axis, inner)

    def _cache_write(self, op: Op, axis: int) -> str:
        cache, new, pos = op.inputs
        b, h, s, d = self.g.tensors[cache].shape
        if axis != 1:
            raise CodegenError(f"op {op.name}: cache_write tiled along axis {axis}; only heads are emitted")
        nshape = self.g.tensors[new].shape
        inner = (f"const long long p = {self.load(pos, 'c0')};\n"
                 + self.store(cache, f"(((long long)c0 * {h} + c1) * {s} + p) * {d} + c3",
                              self.load(new, f"((long long)c0 * {nshape[1]} + c1) * {d} + c3")))
        loop_shape = (b, h, 1, d)
        return self._box_loop(loop_shape, 1, inner)

    def _decode_attention(self, op: Op, axis: int) -> str:
        q, kc, vc, pos = op.inputs
        out = op.outputs[0]
        b, hq, d = self.g.tensors[out].shape
        _, hkv, s_max, _ = self.g.tensors[kc].shape
        group = hq // hkv
        scale = float(op.attrs["scale"])
        if axis != 1:
            raise CodegenError(f"op {op.name}: decode_attention tiled along axis {axis}; only heads are emitted")
        cdt = self.g.tensors[kc].dtype
        epv = EPV.get(cdt, 0)
        if _attention_parallel(self.g, op):
            return self._decode_attention_parallel(op, b, hq, hkv, s_max, d, group, scale, epv)
        if op.name in self.splits:
            raise CodegenError(f"op {op.name}: split attention needs the parallel body ({attention_split_problem(self.g, op)})")
        per_lane = (d + 31) // 32
        first = self._window_first("n - 1", op)
        start = "warp" if first == "0" else f"{first} + warp"
        kv = lambda t: self.load(t, f"((long long)kvrow + s) * {d} + dd")  # noqa: E731
        return (f"  __shared__ float sm_m[{WARPS}], sm_l[{WARPS}], sm_acc[{WARPS}][{d}];\n"
                f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = MK_NT / 32;\n"
                f"  for (int pair = 0; pair < {b} * (hi - lo); ++pair) {{\n"
                f"    const int bb = pair / (hi - lo), h = lo + pair % (hi - lo), kvh = h / {group};\n"
                f"    const int n = (int)({self.load(pos, 'bb')}) + 1;\n"
                f"    const long long qrow = ((long long)bb * {hq} + h) * {d};\n"
                f"    const long long kvrow = ((long long)bb * {hkv} + kvh) * {s_max};\n"
                f"    float m = -INFINITY, l = 0.f, acc[{per_lane}];\n"
                f"    for (int j = 0; j < {per_lane}; ++j) acc[j] = 0.f;\n"
                f"    for (int s = {start}; s < n && s < {s_max}; s += nw) {{\n"
                f"      float dot = 0.f;\n"
                f"      for (int dd = lane; dd < {d}; dd += 32) dot += {self.load(q, 'qrow + dd')} * {kv(kc)};\n"
                f"      const float score = warp_sum(dot) * {scale!r}f;\n"
                f"      const float m_new = fmaxf(m, score), corr = __expf(m - m_new), p = __expf(score - m_new);\n"
                f"      l = l * corr + p;\n"
                f"      for (int j = 0, dd = lane; j < {per_lane}; ++j, dd += 32)\n"
                f"        if (dd < {d}) acc[j] = acc[j] * corr + p * {kv(vc)};\n"
                f"      m = m_new;\n"
                f"    }}\n"
                f"    if (lane == 0) {{ sm_m[warp] = m; sm_l[warp] = l; }}\n"
                f"    for (int j = 0, dd = lane; j < {per_lane}; ++j, dd += 32) if (dd < {d}) sm_acc[warp][dd] = acc[j];\n"
                f"    MK_SYNC();\n"
                f"    for (int dd = threadIdx.x; dd < {d}; dd += MK_NT) {{\n"
                f"      float mx = -INFINITY;\n"
                f"      for (int w = 0; w < nw; ++w) mx = fmaxf(mx, sm_m[w]);\n"
                f"      float lsum = 0.f, o = 0.f;\n"
                f"      for (int w = 0; w < nw; ++w) {{ const float f = sm_m[w] == -INFINITY ? 0.f : "
                f"__expf(sm_m[w] - mx); lsum += sm_l[w] * f; o += sm_acc[w][dd] * f; }}\n"
                f"      {self.store(out, 'qrow + dd', 'o / lsum')}\n"
                f"    }}\n"
                f"    MK_SYNC();\n"
                f"  }}\n")

    def _window_first(self, p: str, op: Op) -> str:
        """C for the first cache slot a query at position `p` attends (ops.window_start)."""
        window = int(op.attrs.get("window", 0))
        return f"max(0, {p} - {window - 1})" if window > 0 else "0"

    def _decode_attention_parallel(self, op: Op, b, hq, hkv, s_max, d, group, scale, epv) -> str:
        """The q heads of one kv head together, over chunks of positions with a running softmax:
        scores with a thread per position (its key row in 16-byte loads, shared by the group's q
        heads), then a warp per head for max and sum, then p.V with a thread per (16-byte slice of
        a value row, every PARTS-th position), reduced across lanes and warps. Every step keeps
        many independent loads in flight, which a warp per position could not."""
        q, kc, vc, pos = op.inputs
        out = op.outputs[0]
        dv = d // epv
        parts = THREADS // dv
        split = self.splits.get(op.name, 1)
        # positions per chunk (the scores' shared memory): a split part attends at most
        # ceil(s_max / split) positions, so it needs no more (one chunk either way: the same sums),
        # and the block's shared memory shrinks with it
        part_max = -(-s_max // split)
        ch = min(s_max, 1024, -(-part_max // 32) * 32)
        esize = ESIZE[self.g.tensors[kc].dtype]
        first = self._window_first(f"(int)({self.load(pos, 'bb')})", op)
        if split > 1:   # this part's slice of the attended positions (ops.split_bounds), else all of them
            span = (f"    const int n_all = min((int)({self.load(pos, 'bb')}) + 1, {s_max});\n"
                    + (f"    const int chunk = (n_all + {split - 1}) / {split};\n"
                       f"    const int s_lo = min(n_all, part * chunk), n = min(n_all, s_lo + chunk);\n"
                       if first == "0" else
                       f"    const int first = min(n_all, {first}), cnt = n_all - first;\n"
                       f"    const int chunk = (cnt + {split - 1}) / {split};\n"
                       f"    const int s_lo = first + min(cnt, part * chunk), n = first + min(cnt, (part + 1) * chunk);\n"))
            lines = -(-d * esize // 128)    # 128-byte lines per cache row
            # the slice is known only now (the whole cache is prefetched for an unsplit tile while it
            # waits): its key and value rows go to L2 before the query is staged, so the value loads,
            # two steps later, find them there
            kp0, vp0 = self.ptr(kc), self.ptr(vc)
            prefetch = (f"  for (int bb = 0; bb < {b}; ++bb) {{\n"
                        + span +
                        f"    const int rows = (n - s_lo) * ((hi - 1) / {group} - lo / {group} + 1);\n"
                        f"    for (int e = threadIdx.x; e < rows * {lines}; e += MK_NT) {{\n"
                        f"      const int row = e / {lines}, line = e % {lines};\n"
                        f"      const long long at = (((long long)bb * {hkv} + lo / {group} + row / (n - s_lo)) * {s_max}"
                        f" + s_lo + row % (n - s_lo)) * {d};\n"
                        f"      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"((const char*)({kp0} + at) + line * 128));\n"
                        f"      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"((const char*)({vp0} + at) + line * 128));\n"
                        f"    }}\n"
                        f"  }}\n")
        else:
            span = (f"    const int s_lo = {first}, n = min((int)({self.load(pos, 'bb')}) + 1, {s_max});\n"
                    f"    (void)part;\n")
            prefetch = ""
        if prefetch and self.kv_prefetch in ("wait", "ahead"):   # the slice needs only pos, no input of this step
            self.prewait, prefetch = prefetch, ""
        pre, rows = bool(self.kv_pre), self.kv_pre
        a = self.absorbed.get(op.name, {})
        # where the attention stores this step's new key / value row itself (_step_inputs), it also
        # puts it into kbuf / vbuf, so that row too is read from shared memory
        fresh = {key: pre and key in a for key in ("kc", "vc")}
        # the first `rows` rows of chunk 0 of the first (sequence, kv head), copied in (kbuf,
        # vbuf: 16-byte aligned past the attention's other scratch)
        base = group * (2 * d + ch) + 3 * group + WARPS * group * d
        buf_at = -(-base // 4) * 4
        self.smem = max(self.smem, 4 * buf_at + 2 * rows * dv * 16 if pre else 4 * base)
        unpack = "unpack_bf16x8" if epv == 8 else "unpack_f32x4"
        kp, vp = self.ptr(kc), self.ptr(vc)
        newrow = f"(int)({self.load(pos, 'bb')})"
        # copied with cp.async (no registers held) before the inputs are staged: rows before this
        # step's row, which no task of this launch writes, so their round trip overlaps the wait
        # instead of following it; waited for at the barrier before the scores
        preload = (f"  uint4* kbuf = (uint4*)(sm + {buf_at}); uint4* vbuf = kbuf + {rows * dv};\n"
                   f"  {{\n"
                   f"    const int bb = 0;\n"
                   + span +
                   f"    const long long kvrow = ((long long)bb * {hkv} + lo / {group}) * {s_max};\n"
                   f"    const int newrow = {newrow}, rows = min(n - s_lo, {rows});\n"
                   f"    for (int e = threadIdx.x; e < rows * {dv}; e += MK_NT) {{\n"
                   f"      const int s = s_lo + e / {dv};\n"
                   f"      if (s == newrow) continue;\n"
                   f"      const long long at = (kvrow + s) * {dv} + e % {dv};\n"
                   f"      asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: "
                   f"\"r\"((unsigned)__cvta_generic_to_shared(kbuf + e)), \"l\"(K4 + at) : \"memory\");\n"
                   f"      asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: "
                   f"\"r\"((unsigned)__cvta_generic_to_shared(vbuf + e)), \"l\"(V4 + at) : \"memory\");\n"
                   f"    }}\n"
                   f"    asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
                   f"  }}\n") if pre else ""

        def from_buf(key: str) -> str:   # row s0 + s of the chunk is in kbuf / vbuf
            return f"pre_first && s < {rows}" + ("" if fresh[key] else " && s0 + s != newrow")
        k_from = ((f"          if ({from_buf('kc')}) {{\n"
                   f"#pragma unroll\n"
                   f"            for (int j = 0; j < {dv}; ++j) kr[j] = kbuf[s * {dv} + j];\n"
                   f"          }} else {{\n"
                   f"#pragma unroll\n"
                   f"            for (int j = 0; j < {dv}; ++j) kr[j] = K4[(kvrow + s0 + s) * {dv} + j];\n"
                   f"          }}\n") if pre else
                  f"          for (int j = 0; j < {dv}; ++j) kr[j] = K4[(kvrow + s0 + s) * {dv} + j];\n")
        v_load = "V4[(kvrow + s0 + s) * " + str(dv) + " + sl]"
        if pre:
            v_load = f"({from_buf('vc')} ? vbuf[s * {dv} + sl] : {v_load})"
        return (prefetch + f"  float* qs = sm; float* sc = qs + {group * d}; float* oacc = sc + {group * ch};\n"
                f"  float* mrun = oacc + {group * d}; float* lrun = mrun + {group}; float* cor = lrun + {group};\n"
                f"  float* red = cor + {group};\n"
                f"  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                f"  const uint4* K4 = (const uint4*){kp};\n"
                f"  const uint4* V4 = (const uint4*){vp};\n"
                + preload +
                f"  for (int bb = 0; bb < {b}; ++bb) {{\n"
                + span
                + (f"    const int newrow = {newrow};\n" if pre else "") +
                f"    for (int h0 = lo; h0 < hi;) {{\n"
                f"      const int kvh = h0 / {group}, h1 = min(hi, (kvh + 1) * {group}), ng = h1 - h0;\n"
                f"      const long long kvrow = ((long long)bb * {hkv} + kvh) * {s_max};\n"
                + (self._step_inputs(op, b, hq, hkv, s_max, d, group, fresh) if op.name in self.absorbed else
                   self.stage(q, f"((long long)bb * {hq} + h0) * {d}", f"ng * {d}", "qs", unit=d)) +
                f"      for (int e = threadIdx.x; e < ng * {d}; e += MK_NT) oacc[e] = 0.f;\n"
                f"      if (threadIdx.x < ng) {{ mrun[threadIdx.x] = -INFINITY; lrun[threadIdx.x] = 0.f; }}\n"
                + ("      if (h0 == lo && bb == 0) asm volatile(\"cp.async.wait_all;\" ::: \"memory\");\n" if pre else "") +
                f"      MK_SYNC();\n"
                f"      if (h0 == lo) MK_PROBE(PROBE_INPUT);\n"
                f"      for (int s0 = s_lo; s0 < n; s0 += {ch}) {{\n"
                f"        const int cn = min({ch}, n - s0);\n"
                + (f"        const bool pre_first = bb == 0 && h0 == lo && s0 == s_lo;\n" if pre else "") +
                f"        for (int s = threadIdx.x; s < cn; s += MK_NT) {{\n"
                + (f"          for (int l = 0; l < {-(-d * esize // 128)}; ++l)   // its value row to L1 for p.V (v_prefetch)\n"
                   f"            asm volatile(\"prefetch.global.L1 [%0];\" :: \"l\"((const char*)(V4 + (kvrow + s0 + s) * {dv}) + l * 128));\n"
                   if self.v_prefetch == "l1" else "") +
                f"          uint4 kr[{dv}];\n"
                + ("" if pre else "#pragma unroll\n") + k_from +
                f"          float dot[{group}];\n"
                f"#pragma unroll\n"
                f"          for (int g = 0; g < {group}; ++g) dot[g] = 0.f;\n"
                f"#pragma unroll\n"
                f"          for (int j = 0; j < {dv}; ++j) {{\n"
                f"            float kf[{epv}]; {unpack}(kr[j], kf);\n"
                f"#pragma unroll\n"
                f"            for (int g = 0; g < {group}; ++g)\n"
                f"#pragma unroll\n"
                f"              for (int e = 0; e < {epv}; ++e) dot[g] += kf[e] * qs[g * {d} + j * {epv} + e];\n"
                f"          }}\n"
                f"#pragma unroll\n"
                f"          for (int g = 0; g < {group}; ++g) if (g < ng) sc[g * {ch} + s] = dot[g] * {scale!r}f;\n"
                f"        }}\n"
                f"        MK_SYNC();\n"
                f"        if (h0 == lo && s0 == s_lo) MK_PROBE(PROBE_FIRST);\n"
                f"        for (int g = warp; g < ng; g += {WARPS}) {{\n"
                f"          float mx = -INFINITY;\n"
                f"          for (int s = lane; s < cn; s += 32) mx = fmaxf(mx, sc[g * {ch} + s]);\n"
                f"          mx = warp_max(mx);\n"
                f"          const float m_old = mrun[g], m_new = fmaxf(m_old, mx);\n"
                f"          float sum = 0.f;\n"
                f"          for (int s = lane; s < cn; s += 32) {{\n"
                f"            const float p = __expf(sc[g * {ch} + s] - m_new); sc[g * {ch} + s] = p; sum += p;\n"
                f"          }}\n"
                f"          sum = warp_sum(sum);\n"
                f"          if (lane == 0) {{\n"
                f"            const float c = m_old == -INFINITY ? 0.f : __expf(m_old - m_new);\n"
                f"            cor[g] = c; lrun[g] = lrun[g] * c + sum; mrun[g] = m_new;\n"
                f"          }}\n"
                f"        }}\n"
                f"        MK_SYNC();\n"
                f"        {{\n"
                f"          const int sl = threadIdx.x % {dv}, part = threadIdx.x / {dv};\n"
                f"          float acc[{group}][{epv}];\n"
                f"#pragma unroll\n"
                f"          for (int g = 0; g < {group}; ++g)\n"
                f"#pragma unroll\n"
                f"            for (int e = 0; e < {epv}; ++e) acc[g][e] = 0.f;\n"
                f"          for (int s1 = part; s1 < cn; s1 += {8 * parts}) {{\n"
                f"            uint4 vr[8];\n"
                f"#pragma unroll\n"
                f"            for (int u = 0; u < 8; ++u) {{\n"
                f"              const int s = s1 + u * {parts};\n"
                f"              vr[u] = s < cn ? {v_load} : make_uint4(0u, 0u, 0u, 0u);\n"
                f"            }}\n"
                f"#pragma unroll\n"
                f"            for (int u = 0; u < 8; ++u) {{\n"
                f"              const int s = s1 + u * {parts};\n"
                f"              if (s < cn) {{\n"
                f"                float vf[{epv}]; {unpack}(vr[u], vf);\n"
                f"#pragma unroll\n"
                f"                for (int g = 0; g < {group}; ++g) {{\n"
                f"                  const float p = g < ng ? sc[g * {ch} + s] : 0.f;\n"
                f"#pragma unroll\n"
                f"                  for (int e = 0; e < {epv}; ++e) acc[g][e] += p * vf[e];\n"
                f"                }}\n"
                f"              }}\n"
                f"            }}\n"
                f"          }}\n"
                f"#pragma unroll\n"
                f"          for (int g = 0; g < {group}; ++g)\n"
                f"#pragma unroll\n"
                f"            for (int e = 0; e < {epv}; ++e) {{\n"
                f"              float v = acc[g][e];\n"
                f"              for (int o = {dv}; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
                f"              if (lane < {dv}) red[(warp * {group} + g) * {d} + sl * {epv} + e] = v;\n"
                f"            }}\n"
                f"        }}\n"
                f"        MK_SYNC();\n"
                f"        for (int e = threadIdx.x; e < ng * {d}; e += MK_NT) {{\n"
                f"          const int g = e / {d};\n"
                f"          float o = oacc[e] * cor[g];\n"
                f"          for (int w = 0; w < {WARPS}; ++w) o += red[(w * {group} + g) * {d} + e % {d}];\n"
                f"          oacc[e] = o;\n"
                f"        }}\n"
                f"        MK_SYNC();\n"
                f"      }}\n"
                + (self._split_partials(op, b, hq, d, split) if split > 1 else
                   f"      for (int e = threadIdx.x; e < ng * {d}; e += MK_NT)\n"
                   f"        {self.store(out, f'((long long)bb * {hq} + h0) * {d} + e', 'oacc[e] / lrun[e / ' + str(d) + ']')}\n") +
                f"      MK_SYNC();\n"
                f"      MK_PROBE(PROBE_LAST);\n"
                f"      h0 = h1;\n"
                f"    }}\n"
                f"  }}\n"
                + (self._split_combine(op, b, hq, d, split)
                   if split > 1 and self.base[out] not in self.deferred else ""))

    def _stage_threads(self, tensor: str, offset: str, count, dst: str, t0: int, t1: int, unit: int = 0) -> str:
        """`stage` by threads [t0, t1) only, so that stages of different tensors given disjoint
        threads poll their inputs at the same time."""
        body = self.stage(tensor, offset, count, dst, unit=unit).replace("threadIdx.x", "tid_").replace(
            "MK_NT", str(t1 - t0))
        return (f"  if (threadIdx.x >= {t0} && threadIdx.x < {t1}) {{\n"
                f"    const int tid_ = threadIdx.x - {t0};\n" + textwrap.indent(body, "  ") + "  }\n")

    def _rope_value(self, rope: Op, x: str, e: str, d: int, p: str) -> str:
        """Element e of a head row of `rope`'s output, its input row at float* x, as _rope computes it
        (the same expression, so the same bits) and rounded as its output tensor stores it."""
        half, theta = d // 2, float(rope.attrs["theta"])
        v = (f"[&]() {{ const int i = ({e}) % {half}; "
             f"const float inv_freq = 1.f / powf({theta!r}f, (float)(2 * i) / {d}.f); "
             f"const float ang = (float)({p}) * inv_freq; float s, co; sincosf(ang, &s, &co); "
             f"const float x1 = {x}[i], x2 = {x}[i + {half}]; "
             f"return ({e}) < {half} ? x1 * co - x2 * s : x2 * co + x1 * s; }}()")
        return f"bf2f(f2bf({v}))" if self.g.tensors[rope.outputs[0]].dtype == "bfloat16" else v

    def _step_inputs(self, op: Op, b: int, hq: int, hkv: int, s_max: int, d: int, group: int,
                     fresh: dict[str, bool] | None = None) -> str:
        """This step's q (heads [h0, h1)) into qs, and the new k and v rows of kv head kvh into the
        caches, for an attention that absorbed its producers (attention_inputs): the rows of the
        projections staged together (q by half the threads, k and v by a quarter each, so that
        their polls overlap) into `red`, which is free until the p.V step, roped there, then q
        kept in qs and k, v stored at row pos; the barrier after makes the stores visible to this
        block's cache reads. Where fresh[key] (kv_pre), the first head's new row also goes to
        kbuf / vbuf, as the cache holds it, where it falls in the rows kept there."""
        a = self.absorbed[op.name]
        qsrc, qrope = a["q"]
        # `red` (_decode_attention_parallel's scratch layout) moved on to 16 bytes: stage writes float4s
        red_at = group * (2 * d + min(s_max, 1024)) + 3 * group
        raw = f"(red + {-red_at % 4})"
        code = self._stage_threads(qsrc, f"((long long)bb * {hq} + h0) * {d}", f"ng * {d}",
                                   raw if qrope else "qs", 0, THREADS // 2, unit=d)
        t0 = THREADS // 2
        for j, key in enumerate(("kc", "vc")):
            if key in a:
                _, src, _ = a[key]
                code += self._stage_threads(src, f"((long long)bb * {hkv} + kvh) * {d}", d,
                                            f"({raw} + {(group + j) * d})", t0, t0 + THREADS // 4)
                t0 += THREADS // 4
        code += "      MK_SYNC();\n"
        pos = op.inputs[3]
        p = f"{self.load(pos, 'bb')}"
        if qrope:
            code += (f"      for (int e = threadIdx.x; e < ng * {d}; e += MK_NT)\n"
                     f"        qs[e] = {self._rope_value(qrope, f'({raw} + e / {d} * {d})', f'e % {d}', d, p)};\n")
        for j, key in enumerate(("kc", "vc")):
            if key not in a:
                continue
            cw, _, rope = a[key]
            cache = cw.inputs[0]
            x = f"({raw} + {(group + j) * d})"
            value = self._rope_value(rope, x, "e", d, p) if rope else f"{x}[e]"
            at = f'((((long long)bb * {hkv} + kvh) * {s_max}) + {p}) * {d} + e'
            if (fresh or {}).get(key):   # the row also to kbuf / vbuf where chunk 0 keeps it
                dt = self.g.tensors[cache].dtype
                packed = f"(({CTYPES[dt]}*)({'kbuf' if key == 'kc' else 'vbuf'}))"
                code += (f"      for (int e = threadIdx.x; e < {d}; e += MK_NT) {{   // {cw.name.rsplit('.', 1)[-1]}: row pos\n"
                         f"        const float v_ = {value};\n"
                         f"        {self.store(cache, at, 'v_')}\n"
                         f"        if (bb == 0 && h0 == lo && (unsigned long long)({p} - s_lo) < {self.kv_pre}ull)\n"
                         f"          {packed}[({p} - s_lo) * {d} + e] = {'f2bf(v_)' if dt == 'bfloat16' else f'({CTYPES[dt]})(v_)'};\n"
                         f"      }}\n")
                continue
            code += (f"      for (int e = threadIdx.x; e < {d}; e += MK_NT)   // {cw.name.rsplit('.', 1)[-1]}: row pos\n"
                     f"        {self.store(cache, at, value)}\n")
        return code + "      MK_SYNC();\n"

    def _split_partials(self, op: Op, b: int, hq: int, d: int, split: int) -> str:
        """A split part's result: per head, the unnormalized output row, its max and its sum, to the
        op's scratch (slot (sequence, head, part))."""
        sp = self.scratch_ptr(op.name, "float")
        at = f"(((long long)bb * {hq} + h0 + g) * {split} + part) * {self.part_stride(d)} + c"
        value = f"c < {d} ? oacc[g * {d} + c] : c == {d} ? mrun[g] : lrun[g]"
        return (f"      {{\n"
                f"        float* part_out = {sp} + {self.arrival_words(op.name)};\n"
                f"        for (int e = threadIdx.x; e < ng * {d + 2}; e += MK_NT) {{\n"
                f"          const int g = e / {d + 2}, c = e % {d + 2};\n"
                f"          part_out[{at}] =\n"
                f"              {value};\n"
                f"        }}\n"
                f"      }}\n")

    def _split_combine(self, op: Op, b: int, hq: int, d: int, split: int) -> str:
        """After its partials are out, a part counts itself in (fence, then an atomic add on its head
        tile's arrival count); the part that makes the count a multiple of the number of parts is the
        last of this run, and combines every part's partials into the output. The counts only grow
        (one round of parts per run), so nothing resets them between runs."""
        size = self.plan.tg.tiling[op.name][2]
        arrive = self.scratch_ptr(op.name, "unsigned")
        sp = self.scratch_ptr(op.name, "float")
        slot = f"(((long long)bb * {hq} + h) * {split} + p) * {self.part_stride(d)}"
        return (f"  __shared__ unsigned mk_last;\n"
                f"  MK_SYNC();\n"
                f"  if (threadIdx.x == 0) {{\n"
                f"    __threadfence();\n"
                f"    const unsigned seen = atomicAdd({arrive} + lo / {size}, 1u);\n"
                f"    mk_last = (seen + 1u) % {split}u == 0u;\n"
                f"    __threadfence();\n"
                f"  }}\n"
                f"  MK_SYNC();\n"
                f"  if (mk_last) {{\n"
                f"    const float* part_out = {sp} + {self.arrival_words(op.name)};\n"
                f"    for (int e = threadIdx.x; e < {b} * (hi - lo) * {d}; e += MK_NT) {{\n"
                f"      const int bb = e / ((hi - lo) * {d}), h = lo + e / {d} % (hi - lo), c = e % {d};\n"
                f"      float mx = -INFINITY;\n"
                f"      for (int p = 0; p < {split}; ++p) mx = fmaxf(mx, __ldcg(part_out + {slot} + {d}));\n"
                f"      float lsum = 0.f, o = 0.f;\n"
                f"      for (int p = 0; p < {split}; ++p) {{\n"
                f"        const float mp = __ldcg(part_out + {slot} + {d});\n"
                f"        const float w = mp == -INFINITY ? 0.f : __expf(mp - mx);\n"
                f"        lsum += w * __ldcg(part_out + {slot} + {d + 1});\n"
                f"        o += w * __ldcg(part_out + {slot} + c);\n"
                f"      }}\n"
                f"      {self.store(op.outputs[0], f'((long long)bb * {hq} + h) * {d} + c', 'o / lsum')}\n"
                f"    }}\n"
                f"  }}\n")


_C_FUNCS = {"exp": "expf({})", "log": "logf({})", "sqrt": "sqrtf({})", "rsqrt": "rsqrtf({})", "tanh": "tanhf({})",
            "sigmoid": "(1.f / (1.f + expf(-({}))))", "silu": "mk_silu({})", "gelu": "mk_gelu({})",
            "gelu_tanh": "mk_gelu_tanh({})", "relu": "fmaxf({}, 0.f)", "abs": "fabsf({})", "sin": "sinf({})",
            "cos": "cosf({})", "erf": "erff({})", "max": "fmaxf({}, {})", "min": "fminf({}, {})"}


def _c_expr(tree) -> str:
    kind = tree[0]
    if kind == "var":
        return f"v_{tree[1]}"
    if kind == "num":
        v = float(tree[1])
        if v != v:
            return "NAN"
        if v in (float("inf"), float("-inf")):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return f"{v!r}f"
    if kind == "neg":
        return f"(-{_c_expr(tree[1])})"
    if kind == "bin":
        _, o, left, right = tree
        if o == "**":
            return f"powf({_c_expr(left)}, {_c_expr(right)})"
        return f"({_c_expr(left)} {o} {_c_expr(right)})"
    if kind == "call":
        return _C_FUNCS[tree[1]].format(*(_c_expr(a) for a in tree[2]))
    raise CodegenError(f"expression node {kind!r} is not emitted")


# Probes (emit_cuda probes=True, a diagnostic): each task's trace row gets PROBE_WORDS words: the
# %globaltimer at its start (waits over) and finish, as without probes, then the SM's clock64 when the
# queue reaches it, when its waits are over, when its input vector is on chip, when its first
# weight stage is in (attention: its first scores), when its last row is done, and when it has signalled.
PROBE_WORDS = 8
PROBE_NAMES = ("dequeued", "started", "input", "first", "last", "signalled")   # words 2..7
_PROBES = r"""
#if MK_PROBES
#define PROBE_WORDS 8
#define PROBE_INPUT 4
#define PROBE_FIRST 5
#define PROBE_LAST 6
__shared__ unsigned long long* mk_probe;   // the running task's trace row (null: no trace), set by the control warp
#define MK_PROBE(k) do { if (threadIdx.x == 0 && mk_probe) mk_probe[k] = clock64(); } while (0)
#else
#define PROBE_WORDS 2
#define MK_PROBE(k) do { } while (0)
#endif
"""

_THREADS = r"""#define WS_PRODUCER_WARP %(producer_warp)d   // a warp of its own issues the weight ring's copies
// maxnreg: the producer's warp comes with a whole warpgroup (warps 8-11), which gives registers back
// (setmaxnreg.dec, to MK_PRODUCER_REGS) so that the compute warps can take MK_MAXNREG (setmaxnreg.inc)
// where ptxas otherwise caps the kernel at 168 (three warps share each of the SM's four register files).
// Hopper's arch-specific sm_90a only; compiled for another arch the kernel runs with the cap.
#define MK_MAXNREG %(maxnreg)d
#define MK_PRODUCER_REGS %(producer_regs)d
#if MK_MAXNREG && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MK_SETMAXNREG 1
#else
#define MK_SETMAXNREG 0
#endif
#if WS_PRODUCER_WARP   // task bodies run on the block less that warp, and sync on barrier 1 alone
#define MK_NT %(nt)d
#define MK_SYNC() asm volatile("bar.sync 1, %(nt)d;" ::: "memory")
#else
#define MK_NT blockDim.x
#define MK_SYNC() __syncthreads()
#endif
"""

_PRELUDE = r"""// megakernel-gym: one persistent kernel for a whole plan (generated; see compiler/codegen.py)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

__device__ __forceinline__ float bf2f(unsigned short v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);   // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                    // round to nearest even
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mk_silu(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float mk_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float mk_gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// weights: read once per step, so 16 bytes through the non-coherent path without allocating in L1
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float dot_bf16x8(uint4 w, float4 a, float4 b) {
  float s = bf_lo(w.x) * a.x;
  s = fmaf(bf_hi(w.x), a.y, s); s = fmaf(bf_lo(w.y), a.z, s); s = fmaf(bf_hi(w.y), a.w, s);
  s = fmaf(bf_lo(w.z), b.x, s); s = fmaf(bf_hi(w.z), b.y, s); s = fmaf(bf_lo(w.w), b.z, s);
  return fmaf(bf_hi(w.w), b.w, s);
}
// the same sums with x as 8 bf16 values (x_bf16): each converted exactly, in the same order
__device__ __forceinline__ float dot_bf16x8_x(uint4 w, uint4 x) {
  float s = bf_lo(w.x) * bf_lo(x.x);
  s = fmaf(bf_hi(w.x), bf_hi(x.x), s); s = fmaf(bf_lo(w.y), bf_lo(x.y), s); s = fmaf(bf_hi(w.y), bf_hi(x.y), s);
  s = fmaf(bf_lo(w.z), bf_lo(x.z), s); s = fmaf(bf_hi(w.z), bf_hi(x.z), s); s = fmaf(bf_lo(w.w), bf_lo(x.w), s);
  return fmaf(bf_hi(w.w), bf_hi(x.w), s);
}
__device__ __forceinline__ float dot_f32x4(uint4 w, float4 a) {
  return __uint_as_float(w.x) * a.x + __uint_as_float(w.y) * a.y + __uint_as_float(w.z) * a.z
         + __uint_as_float(w.w) * a.w;
}
__device__ __forceinline__ void unpack_bf16x8(uint4 w, float* f) {
  f[0] = bf_lo(w.x); f[1] = bf_hi(w.x); f[2] = bf_lo(w.y); f[3] = bf_hi(w.y);
  f[4] = bf_lo(w.z); f[5] = bf_hi(w.z); f[6] = bf_lo(w.w); f[7] = bf_hi(w.w);
}
__device__ __forceinline__ void unpack_f32x4(uint4 w, float* f) {
  f[0] = __uint_as_float(w.x); f[1] = __uint_as_float(w.y); f[2] = __uint_as_float(w.z); f[3] = __uint_as_float(w.w);
}
// a task's weight tile into L2 ahead of its turn (sm_90 bulk prefetch; 16-byte aligned, multiple of 16)
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
// where element e of rows of k floats (k % 8 == 0) sits in the two-plane layout of batched x (_x_split):
// each group of 8 split into its first 4, in the row's first half, and its last 4, in the second
__device__ __forceinline__ int mk_xp(int e, int k) {
  const int r = e / k, c = e - r * k;
  return r * k + ((c & 4) ? (k >> 1) : 0) + ((c >> 3) << 2) + (c & 3);
}
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  MK_SYNC();
  float t = 0.f;
  for (int w = 0; w < (int)(MK_NT / 32); ++w) t += red[w];
  MK_SYNC();
  return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// LL words (hops.py; NCCL's LL protocol, with the flag beside the data): a bf16 activation element
// as one 4-byte word, the value in the low half and the launch's epoch in the high half (float32: 8
// bytes, a word each), written by one store, so a reader that sees this launch's epoch sees the
// value: no fence, no counter, no second trip. mk_ep: this launch's epoch (1-65535, never 0: a
// zeroed word is no launch's).
#define MK_LL_SLEEP 32   // ns between polls of a word not there yet: every thread of a block may poll
__shared__ unsigned mk_ep;
__shared__ unsigned long long mk_spins;   // polls before a word that never comes traps the kernel
__device__ __forceinline__ void ll_st(unsigned* p, unsigned short v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"((mk_ep << 16) | v) : "memory");
}
// a float32 element: 8 bytes, the value in the low word and the epoch in the high one
__device__ __forceinline__ void ll_st(unsigned long long* p, float v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;"
               :: "l"(p), "l"(((unsigned long long)mk_ep << 32) | __float_as_uint(v)) : "memory");
}
__device__ __forceinline__ unsigned long long ll_ld1(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ ulonglong2 ll_ld2(const ulonglong2* p) {
  ulonglong2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned ll_ld1(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ll_ld4(const uint4* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float ll_bf(const unsigned* p) {
  unsigned w = ll_ld1(p);
  for (unsigned long long tries = 0; (w >> 16) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float(w << 16);
}
// a float32 LL word already loaded once (w): polled again until this launch's is there, so that a
// thread can issue many loads together and wait on each only where it was early
__device__ __forceinline__ float ll_f32_from(const unsigned long long* p, unsigned long long w) {
  for (unsigned long long tries = 0; (unsigned)(w >> 32) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float((unsigned)w);
}
__device__ __forceinline__ float ll_f32(const unsigned long long* p) { return ll_f32_from(p, ll_ld1(p)); }
__device__ __forceinline__ bool ll_ok2(ulonglong2 w) { return (unsigned)(w.x >> 32) == mk_ep && (unsigned)(w.y >> 32) == mk_ep; }
__device__ __forceinline__ bool ll_ok4(uint4 w) {
  return (w.x >> 16) == mk_ep && (w.y >> 16) == mk_ep && (w.z >> 16) == mk_ep && (w.w >> 16) == mk_ep;
}"""

_NO_RING = """
#define WS_REFILL do { } while (0)
#define WS_STAGES 0
#define WS_STAGE 0
#define WS_SEGS 0
#define WS_SEG_BYTES 16
#define MK_OPEN() do { } while (0)
extern __shared__ float4 mk_smem[];
"""

_RING_INIT = r"""  {   // the weight ring: the queue's segments into shared memory, the barriers, the first stages
    WsSeg* seg = (WsSeg*)((char*)mk_smem + WS_STAGES * WS_STAGE);
    const int f0 = ws_start[q], nseg = ws_start[q + 1] - f0;
    for (int f = threadIdx.x; f < nseg; f += blockDim.x)
#if WS_CLAIMS   // a claimed call's rows word: rows | (pool + 1) << 16 | group segments << 24
      seg[f] = WsSeg{(const char*)T_global[ws_slot[f0 + f]] + ws_offset[f0 + f], ws_rows[f0 + f] & 0xffff, ws_rowb[f0 + f],
                     ((ws_rows[f0 + f] >> 16) & 0xff) - 1, ws_rows[f0 + f] >> 24};
    for (int p = threadIdx.x; p < WS_CLAIMS; p += blockDim.x) ws_pool_ctr[p] = (unsigned*)T_global[ws_pool_slot[p]];
#else
      seg[f] = WsSeg{(const char*)T_global[ws_slot[f0 + f]] + ws_offset[f0 + f], ws_rows[f0 + f], ws_rowb[f0 + f]};
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int b = 0; b < WS_STAGES; ++b) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&ws_bar[b])) : "memory");
#if WS_PRODUCER_WARP   // a stage's buffer is free again once every compute warp has released it
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&ws_empty[b])), "r"(MK_NT / 32) : "memory");
#endif
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      ws.seg = seg; ws.f = 0; ws.f_end = nseg; ws.s = 0; ws.issued = 0; ws.done = 0;
      ws.pf_f = 0; ws.pf_s = 0; ws.pf = 0; ws.held = 0; ws.nheld = 0;
#if WS_AHEAD
      ws_open = 0; ws_opens = 0;
#endif
#if !WS_PRODUCER_WARP
      ws_pump(WS_STAGES);
#endif
    }
    __syncthreads();
  }"""

_RING = r"""
// The weight ring. A block's streamed matmul calls, in queue order, make one stream of stages
// (WS_SEG bytes of one weight row per warp); a producer warp (WS_PRODUCER_WARP) or thread 0 keeps
// WS_STAGES of them in flight as bulk copies into shared memory, each completing on its stage's
// mbarrier (full), freed by every compute warp's arrival (empty) or the block's barrier. Weights do not depend on
// the step's data, so the stream runs ahead of the counters: a task's first stages are issued as
// soon as the task before it frees a buffer, and land while it waits for its inputs.
#define WS_STAGES %(ws_stages)d
#define WS_SEG %(ws_seg)d
#define WS_STAGE %(ws_stage)d
#define WS_SEGS %(ws_segs)d          // the most ring-fed calls any queue has (16 bytes each)
#define WS_L2_AHEAD %(l2_ahead)d      // stages past the ring prefetched to L2, always
#define WS_L2_WAIT %(l2_wait)d        // stages past the ring prefetched to L2 when a task must wait
#define WS_HOLD %(hold)d              // producer warp: a call's last stages held until the task has signalled
#define WS_INFLIGHT %(inflight)d        // producer warp: the most stages issued and not landed (emit_cuda inflight)
#define WS_INFLIGHT_OPS %(inflight_ops)d    // a call's rows word carries its caps in bits 16-23 (emit_cuda inflight_ops, the IR's edits)
#define WS_ROWS_MASK (WS_INFLIGHT_OPS ? 0xffff : 0xffffff)
#define WS_EVICT_FIRST %(evict_first)d      // the ring's bulk copies leave their lines first in line for eviction from L2 (emit_cuda ring_l2)
#define WS_L2_IDLE %(l2_idle)d          // producer warp: a call's rows word carries stages it sends to L2 while the ring idles (emit_cuda l2_idle)
#define WS_AHEAD %(ahead_on)d            // producer warp: stages of a task not yet past its waits have caps of their own
#define WS_AHEAD_CAP %(ahead)d        // ... at most this many in flight (emit_cuda inflight_ahead; 0: none), or the call's (`ahead` edit)
#if WS_AHEAD
__shared__ volatile unsigned ws_open;   // the stream's segment where the opened tasks end: one before it is on chip's
__shared__ unsigned ws_opens;           // the running task's end, stored there once its input vector is staged (MK_OPEN) or at its end
#define MK_OPEN() do { if (threadIdx.x == 32 * MK_CONTROL_WARP && ws_opens) { ws_open = ws_opens; ws_opens = 0; } } while (0)
#else
#define MK_OPEN() do { } while (0)
#endif
// after a task's signal, thread 0 refills the buffer its last ring stage freed (the stage loop leaves
// it: a bulk copy in flight made the control warp's fence wait for it, about 0.5-1 us a task; with
// control_warp 0, the same thread signalled just before)
#if WS_PRODUCER_WARP   // the producer warp refills a buffer once it is released: the held one, now
#define WS_REFILL do { if (threadIdx.x == 0) ws_unhold(); } while (0)
#else
#define WS_REFILL do { if (threadIdx.x == 0) ws_pump(ws.done + WS_STAGES); } while (0)
#endif
#if WS_CLAIMS
// a claimed op's call (emit_cuda claim): `claim` its tile pool (-1: none), `grp` the group's
// segments (on its first), src the first tile's rows: the producer takes a tile from the pool
// as it reaches the group, streams that tile's rows, and again, until the pool is empty
struct WsSeg { const char* src; int rows, rowb, claim, grp; };
__shared__ int ws_tile[WS_STAGES];                  // per stage: the tile it starts (-1: the pool was empty)
__shared__ unsigned* ws_pool_ctr[WS_CLAIMS];        // per pool: its claim count in memory (only grows)
#else
struct WsSeg { const char* src; int rows, rowb; };   // one ring-fed call: its first weight row, rows, row bytes
#endif
#define WS_SEG_BYTES ((int)sizeof(WsSeg))   // 16, or 24 with claims (codegen's table layout counts the same)
struct WsStream {
  const WsSeg* seg;           // the queue's segments, copied into shared memory at launch
  int f, f_end, s;            // producer: the segment it copies from, the end, the stage within it
  unsigned issued, done;      // stages issued / consumed by this block since the launch
  int pf_f, pf_s; unsigned pf; // the L2 lookahead's cursor (segment, stage within it) and stages sent to L2
  unsigned held, nheld;       // producer warp: a call's last stages, released by thread 0 later (nheld 0: none)
};
__shared__ WsStream ws;
__shared__ __align__(8) unsigned long long ws_bar[WS_STAGES];     // full: the stage's bytes have landed
#if WS_PRODUCER_WARP
__shared__ __align__(8) unsigned long long ws_empty[WS_STAGES];   // empty: every compute warp is done with it
#endif
extern __shared__ float4 mk_smem[];
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ char* ws_stage(unsigned g) { return (char*)mk_smem + (g %% WS_STAGES) * WS_STAGE; }
// thread 0: issue stages until `upto` are issued (or the queue's stream ends). It reads only shared
// memory: warp 0 runs this between two stages of a task, and the other warps wait at the next barrier.
// stage s of segment f: its first row's bytes, rows (one per warp), bytes per row (one WS_SEG piece
// of each), and whether it is whole rows; then the cursor (f, s) moves to the next stage
// (packed rows, codegen.ring_packed: whole rows of 1, 2, 4 or 8 segments, the stage one contiguous
// WS_STAGE bytes of them, so that warp w always gets segment w %% segments of its row)
struct WsAt { const char* src; int nr, seg, rowb; bool whole, packed; };
__device__ __forceinline__ WsAt ws_at(int& f, int& s) {
  WsSeg sg = ws.seg[f];
  sg.rows &= WS_ROWS_MASK;   // (the bytes above: the call's own in-flight cap, its l2_idle stages)
  const int ncs = (sg.rowb + WS_SEG - 1) / WS_SEG;
  if (sg.rowb %% WS_SEG == 0 && %(warps)d %% ncs == 0) {
    const int rps = %(warps)d / ncs;
    const WsAt a{sg.src + (long long)s * rps * sg.rowb, min(rps, sg.rows - s * rps), sg.rowb, sg.rowb, true, true};
    if (++s == (sg.rows + rps - 1) / rps) { s = 0; ++f; }
    return a;
  }
  const int rg = s / ncs, cs = s - rg * ncs;
  const WsAt a{sg.src + (long long)rg * %(warps)d * sg.rowb + (long long)cs * WS_SEG, min(%(warps)d, sg.rows - rg * %(warps)d),
               min(WS_SEG, sg.rowb - cs * WS_SEG), sg.rowb, ncs == 1, false};
  if (++s == (sg.rows + %(warps)d - 1) / %(warps)d * ncs) { s = 0; ++f; }
  return a;
}
// one bulk copy of n bytes from global src to shared dst, completing on barrier bar; with
// WS_EVICT_FIRST under the L2 policy pol (weights are read once a step: their L2 lines go before
// the KV slices, LL words and counters)
#if WS_EVICT_FIRST
#define WS_BULK(dst, src, n, bar, pol) \
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%%0], [%%1], %%2, [%%3], %%4;" \
               :: "r"(dst), "l"(src), "r"(n), "r"(bar), "l"(pol) : "memory")
#else
#define WS_BULK(dst, src, n, bar, pol) \
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%0], [%%1], %%2, [%%3];" \
               :: "r"(dst), "l"(src), "r"(n), "r"(bar) : "memory")
#endif
// stage g's bulk copies, completing on its full barrier
__device__ __forceinline__ void ws_copy(const WsAt& a, unsigned g) {
  const unsigned bar = smem_addr(&ws_bar[g %% WS_STAGES]);
  const unsigned dst = smem_addr(ws_stage(g));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;" :: "r"(bar), "r"(a.nr * a.seg) : "memory");
  unsigned long long pol = 0;
#if WS_EVICT_FIRST
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %%0, 1.0;" : "=l"(pol));
#endif
  (void)pol;
  if (a.packed)   // one copy of the stage's whole rows
    WS_BULK(dst, a.src, a.nr * a.seg, bar, pol);
  else for (int r = 0; r < a.nr; ++r)
    WS_BULK(dst + r * WS_SEG, a.src + (long long)r * a.rowb, a.seg, bar, pol);
}
__device__ void ws_l2(unsigned upto);
__device__ void ws_pump(unsigned upto) {
  if (ws.issued < upto && ws.f < ws.f_end)   // the buffers were last read through the generic proxy
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  while (ws.issued < upto && ws.f < ws.f_end) {
    ws_copy(ws_at(ws.f, ws.s), ws.issued);
    ++ws.issued;
  }
#if WS_L2_AHEAD > 0
  ws_l2(upto + WS_L2_AHEAD);
#endif
}
// thread 0: the stream's stages up to `upto` that are past the ring go to L2 (cp.async.bulk.prefetch.L2),
// so that a wait longer than the ring's depth still keeps this SM's share of the memory pipe busy
// (`piece`: bytes per prefetch of whole rows, all of them at once by default; ws_idle_l2 sends 4 KB
// pieces, since one prefetch of a whole 32 KB stage measured slower than those: bench/results/
// l2_probe.json, 64 KB past a 5-stage ring, 8 us of waiting, then the run)
__device__ __forceinline__ void ws_stage_l2(const WsAt& a, int piece = 1 << 30) {
  if (a.whole)   // whole rows: the stage is one contiguous run of nr rows
    for (int c = 0; c < a.nr * a.rowb; c += piece) prefetch_l2(a.src + c, (unsigned)min(piece, a.nr * a.rowb - c));
  else
    for (int r = 0; r < a.nr; ++r) prefetch_l2(a.src + (long long)r * a.rowb, (unsigned)a.seg);
}
__device__ void ws_l2(unsigned upto) {
  if (ws.pf < ws.issued) { ws.pf = ws.issued; ws.pf_f = ws.f; ws.pf_s = ws.s; }
  while (ws.pf < upto && ws.pf_f < ws.f_end) {
    ws_stage_l2(ws_at(ws.pf_f, ws.pf_s));
    ++ws.pf;
  }
}
// until the barrier's phase of this parity has completed (one that never does is a bug: trap)
__device__ __forceinline__ void ws_wait_bar(unsigned bar, unsigned parity) {
  for (unsigned long long tries = 0;; ++tries) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%%1], %%2; selp.u32 %%0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    if (ok) return;
    if (tries > (1ull << 26)) __trap();
  }
}
// every thread: until stage g is in shared memory
__device__ __forceinline__ void ws_wait(unsigned g) {
  ws_wait_bar(smem_addr(&ws_bar[g %% WS_STAGES]), (g / WS_STAGES) & 1u);
}
#if WS_PRODUCER_WARP
// a compute warp done reading stage g (every lane's loads of it are in registers): one arrival
__device__ __forceinline__ void ws_release(unsigned g) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0];" :: "r"(smem_addr(&ws_empty[g %% WS_STAGES])) : "memory");
}
// thread 0: the stage a ring call held back is released for all compute warps (they are past it)
__device__ __forceinline__ void ws_unhold() {
  for (unsigned h = 0; h < ws.nheld; ++h)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0], %%1;"
                 :: "r"(smem_addr(&ws_empty[(ws.held + h) %% WS_STAGES])), "r"(MK_NT / 32) : "memory");
  ws.nheld = 0;
}
#if WS_L2_IDLE
__device__ __forceinline__ bool ws_test_bar(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%%1], %%2; selp.u32 %%0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok;
}
// the producer, about to refill a buffer for stage g of the call at (f, s), whose rows word asks for
// n stages to L2 while the ring idles, the buffer's last stage also of such a call (so the ring is
// full of the waiting task's own weights, not of the task's before: a task waiting on its inputs
// while the attention half's chain runs is left alone, since extra reads there slow that chain):
// until the buffer is free, if the newest stage in flight lands first (the ring is full and landed,
// its oldest stage unreleased: the task is staging its inputs, and nothing of this SM's is in the
// memory pipe), stages g .. g + n - 1 (those not sent yet, li) go to L2, so that the bulk copies
// that later fill the ring with them hit it
__device__ void ws_idle_l2(int f, int s, unsigned g, unsigned& li) {
  const unsigned n = (unsigned)ws.seg[f].rows >> 24;
  const unsigned eb = smem_addr(&ws_empty[g %% WS_STAGES]), ep = (g / WS_STAGES - 1) & 1u;
  const unsigned fb = smem_addr(&ws_bar[(g - 1) %% WS_STAGES]), fp = ((g - 1) / WS_STAGES) & 1u;
  for (;;) {
    if (ws_test_bar(eb, ep)) return;   // a buffer came free: the ring moves on
    if (ws_test_bar(fb, fp)) break;    // landed and not released: the task waits
  }
  unsigned k = g;
  for (; k < g + n && f < ws.f_end; ++k) {
    const WsAt a = ws_at(f, s);
    if (k >= li) ws_stage_l2(a, 4096);
  }
  li = k;
}
#endif
// the producer warp's first lane: the queue's whole stream of stages, each as soon as its buffer is
// free (every compute warp released the stage WS_STAGES before it), never in a compute warp's way
// With WS_L2_AHEAD, the WS_L2_AHEAD stages past the ring's are sent to L2 before it waits for a
// buffer, so while the ring is full (its tasks wait for their inputs) the memory pipe still works.
__device__ void ws_produce() {
  int f = 0, s = 0;
#if WS_INFLIGHT_OPS || WS_AHEAD
  unsigned landed = 0;   // every stage before it has landed (the per-op caps' waits)
#endif
#if WS_CLAIMS
  int k = -1, g0 = 0, g1 = 0;   // the tile a claim group streams (-1: none yet), the group's first segment and its end
  unsigned ahead = 0;           // a claim in flight for the group at f (taken as the stage before it went out)
  bool have = false;
#endif
#if WS_L2_AHEAD > 0
  int lf = 0, ls = 0;
  unsigned lg = 0;   // the L2 lookahead's cursor: stages it has passed (those the ring will hold it skips)
#endif
#if WS_L2_IDLE
  unsigned li = 0;            // stages of the stream sent to L2 while the ring idled (ws_idle_l2)
  int ring_f[WS_STAGES];      // the segment each buffer's stage came from
#endif
  for (unsigned g = 0; f < ws.f_end; ++g) {
#if WS_L2_AHEAD > 0
    for (; lg < g + WS_STAGES + WS_L2_AHEAD && lf < ws.f_end; ++lg) {
      const WsAt a = ws_at(lf, ls);
      if (lg >= g + WS_STAGES) ws_stage_l2(a);
    }
#endif
#if WS_CLAIMS
    // a claimed op's call: the pool's next tile. Its claim goes out before the wait for a buffer
    // (here, or as the stage before went out), so its round trip overlaps that wait
    if (k < 0 && !have && ws.seg[f].claim >= 0) { ahead = atomicAdd(ws_pool_ctr[ws.seg[f].claim], 1u); have = true; }
#endif
#if WS_L2_IDLE
    if (g >= WS_STAGES && (ws.seg[f].rows >> 24) && (ws.seg[ring_f[g %% WS_STAGES]].rows >> 24)
        && li < g + ((unsigned)ws.seg[f].rows >> 24)) ws_idle_l2(f, s, g, li);
    ring_f[g %% WS_STAGES] = f;
#endif
    if (g >= WS_STAGES) ws_wait_bar(smem_addr(&ws_empty[g %% WS_STAGES]), (g / WS_STAGES - 1) & 1u);
#if WS_INFLIGHT_OPS || WS_AHEAD   // the call's own cap (0: WS_INFLIGHT): every stage from g - cap back has landed
    {
      // with per-op caps the rows word's bits 16-20 hold the call's cap, 21-23 its cap while its task waits
      const int rw = WS_INFLIGHT_OPS ? ws.seg[f].rows : 0;
      const int own = (rw >> 16) & 0x1f;
      int cap = own ? own : WS_INFLIGHT;
#if WS_AHEAD   // a stage of a task still waiting for its inputs (or further on): its own cap for that, else WS_AHEAD_CAP
      const int own_ahead = (rw >> 21) & 7, ahead = own_ahead ? own_ahead : WS_AHEAD_CAP;
      // (ws_open, which the control warp moves, is read only for a call that has such a cap)
      if (ahead && (unsigned)f >= ws_open) cap = ahead;   // below its cap once running (fewer copies in the chain's way) or above it
#endif
      // each stage is waited for once, oldest first (`landed`: every stage before it has landed), so a
      // cap below the ring costs one barrier wait a stage, as the single cap's does, not one per stage
      // between the cap and the ring's depth (H200, megakernel_edits_inflight_cost.json); a stage
      // WS_STAGES back was released, so it had landed
      if (landed + WS_STAGES <= g) landed = g + 1 - WS_STAGES;
      for (; landed + cap <= g; ++landed) ws_wait_bar(smem_addr(&ws_bar[landed %% WS_STAGES]), (landed / WS_STAGES) & 1u);
    }
#elif WS_INFLIGHT < WS_STAGES
    if (g >= WS_INFLIGHT) ws_wait_bar(smem_addr(&ws_bar[(g - WS_INFLIGHT) %% WS_STAGES]), ((g - WS_INFLIGHT) / WS_STAGES) & 1u);
#endif
#if WS_CLAIMS
    if (k < 0 && ws.seg[f].claim >= 0) {
      const int p = ws.seg[f].claim;
      const unsigned v = ahead %% (unsigned)ws_pool_claims[p];
      have = false;
      if (v >= (unsigned)ws_pool_tiles[p]) {   // none left: a stage of no bytes says so, and the group ends
        ws_tile[g %% WS_STAGES] = -1;
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0];" :: "r"(smem_addr(&ws_bar[g %% WS_STAGES])) : "memory");
        f += ws.seg[f].grp;
        continue;
      }
      k = (int)v; g0 = f; g1 = f + ws.seg[f].grp;
      ws_tile[g %% WS_STAGES] = k;   // seen by the compute warps after this stage's full barrier
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const long long shift = k >= 0 ? (long long)k * ws.seg[f].rows * ws.seg[f].rowb : 0;
    WsAt a = ws_at(f, s);
    a.src += shift;
    ws_copy(a, g);
    if (k >= 0 && f == g1) { f = g0; k = -1; }   // the tile's rows are all issued: take another
    if (k < 0 && !have && f < ws.f_end && ws.seg[f].claim >= 0) { ahead = atomicAdd(ws_pool_ctr[ws.seg[f].claim], 1u); have = true; }
#else
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the buffer was read through the generic proxy
    ws_copy(ws_at(f, s), g);
#endif
  }
}
#endif
"""

_MAIN = r"""
// One block per SM queue. Its tasks come as one stream of int words (emit_cuda's q_stream), copied
// into shared memory at launch with the pointer table T and the slot lists, so that nothing a task
// needs before its data (which task, what to wait for, which calls, what to signal) is a trip to
// memory: with the L2 cold, as it is at every decode step, each such trip costs about a microsecond.
// Per task: t, waits, calls, signals, prefetches; then (counter, target) per wait, (function, lo,
// hi, part, first slot) per call, a counter per signal, (slot, byte lo, byte hi, bytes) per prefetch.
// status: [0] 0 = ran, 1 = a wait ran out of spins; [1] task; [2] counter.
// Before each task's waits, warp 0 issues the L2 prefetches scheduled at this queue position
// (weight tiles of this or later tasks, as the schedule's prefetch depth says), so weights stream
// while the task waits for its inputs.
// (one block per SM: __launch_bounds__ min 1 lets ptxas use all of its registers, which the ring's
// x in registers needs without spilling)
extern "C" __global__ void __launch_bounds__(%(threads)d, 1) megakernel(
    void* const* T_global, const int* __restrict__ slot_args_global, const int* __restrict__ q_stream,
    const int* __restrict__ qs_start, const int* __restrict__ ws_start,
    const int* __restrict__ ws_slot, const long long* __restrict__ ws_offset, const int* __restrict__ ws_rows,
    const int* __restrict__ ws_rowb, unsigned* counters,
    unsigned long long spin_budget, int* status, unsigned long long* trace, unsigned epoch) {
  if (threadIdx.x == 0) { mk_ep = epoch; mk_spins = spin_budget; }   // seen after the barrier below
  char* lay = (char*)mk_smem + WS_STAGES * WS_STAGE + WS_SEGS * WS_SEG_BYTES;   // past the weight ring
  void** T = (void**)lay;
  int* slot_args = (int*)(lay + %(n_slots)d * 8);
  const int q = blockIdx.x, qn = qs_start[q + 1] - qs_start[q];
  const int* QS = QS_SMEM ? slot_args + %(n_args)d : q_stream + qs_start[q];
  float* sm = (float*)(lay + %(tab_bytes)d);                         // op scratch, past the tables
  for (int k = threadIdx.x; k < %(n_slots)d; k += blockDim.x) T[k] = T_global[k];
  for (int k = threadIdx.x; k < %(n_args)d; k += blockDim.x) slot_args[k] = slot_args_global[k];
  if (QS_SMEM)
    for (int k = threadIdx.x; k < qn; k += blockDim.x) ((int*)QS)[k] = q_stream[qs_start[q] + k];
  __syncthreads();
%(ring_init)s
#if WS_PRODUCER_WARP
  if (threadIdx.x >= MK_NT) {   // the producer warp: the weight ring's copies, nothing else
#if MK_SETMAXNREG   // its whole warpgroup gives its registers back, then all but one thread leave
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %%0;" :: "n"(MK_PRODUCER_REGS));
#endif
    if (threadIdx.x == MK_NT) ws_produce();
    return;
  }
#if MK_SETMAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %%0;" :: "n"(MK_MAXNREG));
#endif
#endif
  for (int p = 0; p < qn;) {
    const int t = QS[p], nw = QS[p + 1], nc = QS[p + 2] & MK_CALLS_MASK, ns = QS[p + 3], npf = QS[p + 4];
#if WS_AHEAD
    const unsigned opens = (unsigned)QS[p + 2] >> 16;   // where this task's ring segments end, if it has capped ones (else 0)
#endif
    const int* W = QS + p + 5;
    const int* C = W + 2 * nw;
    const int* G = C + 5 * nc;
    const int* F = G + ns;
    p += 5 + 2 * nw + 5 * nc + ns + 4 * npf;
#if MK_PROBES
    if (threadIdx.x == 32 * MK_CONTROL_WARP) {   // the next task's row (thread 0, which writes the body's probes, sees it after the waits)
      mk_probe = trace ? trace + PROBE_WORDS * t : nullptr;
      if (mk_probe) mk_probe[2] = clock64();
    }
#endif
%(prewait)s
%(prefetch)s
%(l2_wait)s
    if (threadIdx.x / 32 == MK_CONTROL_WARP) {   // its 32 lanes poll the task's counters side by side
      for (int w = threadIdx.x %% 32; w < nw; w += 32) {
        unsigned long long spins = 0;
        while (ld_acquire(&counters[W[2 * w]]) < (unsigned)W[2 * w + 1]) {
          if (++spins > spin_budget) {
            status[1] = t; status[2] = W[2 * w];
            __threadfence_system();
            atomicExch(&status[0], 1);
            __trap();
          }
          __nanosleep(32);
        }
      }
      __syncwarp();
#if WS_AHEAD   // its counters are full: its stages go at their own caps once its input is staged (LL polls) too
      if (opens && threadIdx.x == 32 * MK_CONTROL_WARP) ws_opens = opens;
#endif
      if (trace && threadIdx.x == 32 * MK_CONTROL_WARP) {
        unsigned long long g; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g)); trace[PROBE_WORDS * t] = g;
#if MK_PROBES
        mk_probe[3] = clock64();
#endif
      }
    }
    MK_SYNC();
    for (int c = 0; c < nc; ++c) {
      const int* cc = C + 5 * c;
%(claim_loop)s
      switch (cc[0]) {
%(cases)s
      }
      MK_SYNC();
    }
#if WS_AHEAD
    if (opens) MK_OPEN();   // (a task whose calls staged no input vector)
#endif
    if (threadIdx.x == 32 * MK_CONTROL_WARP) {   // the block's writes are ordered by the barrier above, published by this release
#if MK_SIGNAL_RELEASE   // each counter's add a release of its own
      for (int k = 0; k < ns; ++k)
        asm volatile("red.release.gpu.global.add.u32 [%%0], 1;" :: "l"(&counters[G[k]]) : "memory");
#else
      if (ns > 0) asm volatile("fence.acq_rel.gpu;" ::: "memory");   // none: its readers poll LL words
      for (int k = 0; k < ns; ++k)
        asm volatile("red.relaxed.gpu.global.add.u32 [%%0], 1;" :: "l"(&counters[G[k]]) : "memory");
#endif
      if (trace) { unsigned long long g; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(g)); trace[PROBE_WORDS * t + 1] = g; }
#if MK_PROBES
      if (mk_probe) mk_probe[7] = clock64();
#endif
    }
    WS_REFILL;
  }
}
"""


# warp 0 issues one bulk L2 prefetch per 32 KB (sm_90's cp.async.bulk.prefetch.L2) for the weight
# tiles scheduled at this queue position (F: slot, first byte low and high words, bytes)
_BULK_LOOP = """for (int f = 0; f < npf; ++f) {
  const char* base = (const char*)T[F[4 * f]] + (long long)(((unsigned long long)(unsigned)F[4 * f + 2] << 32) | (unsigned)F[4 * f + 1]);
  for (int c = threadIdx.x * %(chunk)d; c < F[4 * f + 3]; c += 32 * %(chunk)d)
    prefetch_l2(base + c, (unsigned)min(%(chunk)d, F[4 * f + 3] - c));
}"""
# warp 0: whether any of the task's counters is still short of its target (the scope stays open)
_MUST_WAIT = """    if (threadIdx.x < 32) {
      bool must_wait = false;
      for (int w = threadIdx.x; w < nw; w += 32)
        must_wait |= ld_acquire(&counters[W[2 * w]]) < (unsigned)W[2 * w + 1];"""
_PREFETCH = {
    "bulk": "    if (threadIdx.x < 32) {\n" + textwrap.indent(_BULK_LOOP, " " * 6) + "\n    }",
    # bulk L2 prefetch only when the task must wait: warp 0 looks at its counters once, and a task
    # whose inputs are ready issues nothing (its bytes would compete with its own loads), while one
    # that waits (most SMs during a layer's attention) streams its weights to L2 in the meantime
    "idle": _MUST_WAIT + """
      if (__any_sync(0xffffffffu, must_wait)) {
""" + textwrap.indent(_BULK_LOOP, " " * 8) + "\n      }\n    }",
    # every thread prefetches 128-byte lines (prefetch.global.L2::evict_last), before the barrier
    "lines": """    for (int f = 0; f < npf; ++f) {
      const char* base = (const char*)T[F[4 * f]] + (long long)(((unsigned long long)(unsigned)F[4 * f + 2] << 32) | (unsigned)F[4 * f + 1]);
      for (int c = threadIdx.x * 128; c < F[4 * f + 3]; c += MK_NT * 128)
        asm volatile("prefetch.global.L2::evict_last [%%0];" :: "l"(base + c));
    }""",
}
PREFETCH_MODES = tuple(_PREFETCH)
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
# a task that must wait sends the WS_L2_WAIT stages past the ring to L2 first, so the memory pipe
# works while the SM idles; a task whose inputs are ready adds nothing to its own streaming
_L2_WAIT = _MUST_WAIT + """
      if (__any_sync(0xffffffffu, must_wait) && threadIdx.x == 0) ws_l2(ws.issued + WS_L2_WAIT);
    }"""


# how a decode attention reads this step's q, k, v where its producers are fused into it
# (_Emitter.attention_inputs): in its own body, all staged together ("body"), or through the
# producers' prologue calls, one after another ("calls")
STEP_INPUTS = ("body", "calls")


# the main loop's claimed call: the tiles the producer warp took from the op's pool for this task,
# one after another, each announced with its first stage (ws_tile); a stage of no bytes, its
# tile -1, says the pool was empty, and is released unread
_CLAIM_LOOP = r"""#if WS_CLAIMS
      if (cc[3] == MK_CLAIMED) {
        for (int again = 0;; again = 1) {
          const unsigned g = ws.done;
          ws_wait(g);
          const int k = ws_tile[g %% WS_STAGES];
          MK_SYNC();
          if (k < 0) {
            if (threadIdx.x == 0) {
              asm volatile("mbarrier.arrive.shared::cta.b64 _, [%%0], %%1;"
                           :: "r"(smem_addr(&ws_empty[g %% WS_STAGES])), "r"(MK_NT / 32) : "memory");
              ws.done = g + 1;
            }
            MK_SYNC();
            break;
          }
          const int tl = cc[2] - cc[1], tlo = k * tl;
          switch (cc[0]) {
%(cases)s
          }
          MK_SYNC();
        }
        continue;
      }
#endif"""


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
    if weights == "smem" and not impls:
        build = Build(prefetch_mode=prefetch_mode, weights=weights, stream=stream, ring_stages=ring_stages,
                      l2_ahead=l2_ahead, l2_wait=l2_wait, probes=probes, control_warp=control_warp, hops=hops,
                      combine=combine, producer=producer, signal=signal, hold=hold, kv_prefetch=kv_prefetch,
                      ll_poll_ns=ll_poll_ns, hold_ops=hold_ops, step_inputs=step_inputs, kv_pre=kv_pre, claim=claim,
                      claim_split=claim_split, l2_idle=l2_idle, inflight=inflight, inflight_ops=inflight_ops,
                      x_bf16=bool(x_bf16), ring_l2=ring_l2, v_prefetch=v_prefetch, inflight_ahead=inflight_ahead,
                      distinct_ops=distinct_ops, maxnreg=maxnreg)
        source, table = _emit(plan, impls, build)
        if table.ws_stages >= 2:
            return source, table
    # no room for a ring of 2 stages, or impls: weights loaded to registers, thread 0's stream, the ring's knobs off
    return _emit(plan, impls, Build(prefetch_mode, "regs", stream, probes=probes, control_warp=control_warp,
                                    hops=regs_hops, combine=combine, producer="thread", signal=signal,
                                    kv_prefetch=kv_prefetch, ll_poll_ns=ll_poll_ns, step_inputs=step_inputs,
                                    kv_pre=kv_pre, v_prefetch=v_prefetch, distinct_ops=distinct_ops))


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

    em, _, _, op_ids, _, _ = _op_functions(plan, {}, b, frozenset(), prologue_names)
    ll = ll_tensors(plan, em.access, em.base, em.called)
    if ll:
        op_ids = _op_functions(plan, {}, b, ll, prologue_names, em.epilogues)[3]
    return {op: tuple(op_ids[p] for p in calls) + (op_ids[op],) for op, calls in prologue.items()}


def _emit_once(plan: Plan, impls: dict[str, str], b: "Build",
               ll: frozenset[str] = frozenset()) -> tuple[str, TaskTable, "_Emitter"]:
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
    functions = [f"// used by {len(users[fid])} op(s): {', '.join(users[fid][:4])}{' ...' if len(users[fid]) > 4 else ''}\n"
                 f"__device__ __forceinline__ void op_{fid}(void* const* T, const int* __restrict__ S, int lo, int hi, "
                 f"int part, float* sm) {{\n"
                 f"{body.replace('MK_IMPL_FID', str(fid))}}}\n"
                 + (f"// op_{fid}'s work that needs no input of this step, run before the task's waits\n"
                    f"__device__ __forceinline__ void pre_{fid}(void* const* T, const int* __restrict__ S, int lo, int hi, "
                    f"int part) {{\n{pre}}}\n" if pre else "")
                 for (body, pre, _), fid in bodies.items()]

    op_slot_start, slot_args = {}, []
    for name in used:
        op_slot_start[name] = len(slot_args)
        slot_args += op_slots[name]
    call_start, call_op, call_lo, call_hi, call_slots, call_names, call_part = [0], [], [], [], [], [], []
    for t in plan.tg.tasks:
        for pname, pbox in prologues[t.id]:
            ax = plan.tg.tiling[pname][0]
            call_names.append(pname)
            call_op.append(op_ids[pname])
            call_slots.append(op_slot_start[pname])
            call_lo.append(pbox[ax][0])
            call_hi.append(pbox[ax][1])
            call_part.append(0)
        obox, _ = task_boxes(plan.tg, t, ops[t.op])
        ax = plan.tg.tiling[t.op][0]
        call_names.append(t.op)
        call_op.append(op_ids[t.op])
        call_slots.append(op_slot_start[t.op])
        call_lo.append(obox[ax][0])
        call_hi.append(min(obox[ax][1], g.tensors[ops[t.op].outputs[0]].shape[ax]))
        call_part.append(t.part)
        call_start.append(len(call_op))
    n = len(plan.tg.tasks)
    # LL words enforce some dependencies themselves (hops.kept_waits); a counter nobody waits on
    # any more is not signalled, and a task that signals nothing skips its fence
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
    q_start, q_task = [0], []
    for q in plan.queues:
        q_task += list(q)
        q_start.append(len(q_task))
    # prefetch depth d: a task's weight tiles go to L2 when its queue reaches the task d-1 places
    # before it (d = 1: as the task starts waiting; deeper: while earlier tasks run). Attention
    # tasks always prefetch their KV cache regions as they start waiting.
    depth = (plan.knobs.prefetch if plan.knobs else {}) or {}
    at: dict[int, list[tuple[int, int, int]]] = {}
    for qi, q in enumerate(plan.queues):
        for j, t in enumerate(q):
            own = call_start[t + 1] - 1
            if plan.tg.tasks[t].parts == 1:   # a split part reads a slice known only at run time: no prefetch
                at.setdefault(q_start[qi] + j, []).extend(em.cache_bytes(ops[call_names[own]], call_lo[own], call_hi[own]))
            for c in range(call_start[t], call_start[t + 1]):
                for name in [p.name for p in em.epilogues.get(call_names[c], ())] or [call_names[c]]:
                    # a fused producer's weights follow its own depth (the consumer may read no weight)
                    d = max(depth.get(name, 0), depth.get(plan.tg.tasks[t].op, 0))
                    if d <= 0:
                        continue
                    item = em.weight_bytes(ops[name], call_lo[c], call_hi[c])
                    if item:
                        at.setdefault(q_start[qi] + max(0, j - (d - 1)), []).append(item)
    pf_start, pf_slot, pf_offset, pf_bytes = [0], [], [], []
    for i in range(len(q_task)):
        for slot, off, nb in at.get(i, ()):
            pf_slot.append(slot)
            pf_offset.append(off)
            pf_bytes.append(nb)
        pf_start.append(len(pf_slot))
    pools = _claim_pools(plan, em, ops, call_start, call_names, call_lo, call_hi, signal_start, ll, b.claim_split)
    pool_of = {name: i for i, name in enumerate(pools)}
    for name in pools:   # each pool's claim count: a word of scratch, zero at bind, that only grows
        em.scratch[name + "#claim"] = (len(em.slots) + len(em.scratch), 16)
    # the weight ring's stream: per queue, the weight rows of its ring-fed calls in queue and call
    # order (what the calls consume, stage by stage, is what ws_pump issues, stage by stage); a
    # claimed op's call (its pool's index and its segment count in the rows word) names its first
    # tile's rows, which the producer moves to each tile it takes
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
            for c in range(call_start[t], call_start[t + 1]):
                pool = pool_of.get(call_names[c], -1)
                rows = pools[call_names[c]][2] if pool >= 0 else call_hi[c] - call_lo[c]
                feeds = [p.name for p in em.epilogues.get(call_names[c], ())] or [call_names[c]]
                first = len(ws_slot)
                for name in feeds:   # a fused epilogue's call streams each producer's rows in turn
                    if name in em.bulk_ops and rows > 0:
                        slot, off, nb = em.weight_bytes(ops[name], *((0, rows) if pool >= 0 else (call_lo[c], call_hi[c])))
                        ws_slot.append(slot)
                        ws_offset.append(off)
                        idle = next((n for pat, n in b.l2_idle if re.search(pat, call_names[c])), 0)
                        cap = next((n for pat, n in b.inflight_ops if re.search(pat, call_names[c])), 0) \
                            or knob_caps.get(name, 0)
                        if per_op and rows >= 1 << 16:   # the rows word's bits 16-23 carry the caps (ir.RING_ROWS)
                            raise CodegenError(f"inflight_ops: {call_names[c]}'s ring call streams {rows} rows; with "
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
    # each queue's tasks as one stream of words (the kernel's main loop reads nothing else per task)
    q_stream, qs_start = [], [0]
    for qi, q in enumerate(plan.queues):
        for j, t in enumerate(q):
            i = q_start[qi] + j
            w0, w1 = wait_start[t], wait_start[t + 1]
            c0, c1 = call_start[t], call_start[t + 1]
            s0, s1 = signal_start[t], signal_start[t + 1]
            f0, f1 = pf_start[i], pf_start[i + 1]
            # inflight_ahead / ahead edits: where the task's capped stages end in the calls word's high half (its calls in the low)
            q_stream += [t, w1 - w0, (c1 - c0) | (open_end.get(t, 0) << 16 if ahead_on else 0), s1 - s0, f1 - f0]
            for w in range(w0, w1):
                q_stream += [wait_counter[w], wait_target[w]]
            for c in range(c0, c1):
                q_stream += ([call_op[c], 0, pools[call_names[c]][2], MK_CLAIMED, call_slots[c]]   # a pool tile's rows
                             if call_names[c] in pools else
                             [call_op[c], call_lo[c], call_hi[c], call_part[c], call_slots[c]])
            q_stream += signal_counter[s0:s1]
            for f in range(f0, f1):
                q_stream += [pf_slot[f], pf_offset[f] & 0xFFFFFFFF, pf_offset[f] >> 32, pf_bytes[f]]
        qs_start.append(len(q_stream))
    q_stream = [w - (1 << 32) if w >= (1 << 31) else w for w in q_stream]   # int32 words
    n_slots, n_args = len(em.slots) + len(em.scratch), max(1, len(slot_args))
    words = max((qs_start[k + 1] - qs_start[k] for k in range(len(plan.queues))), default=0)
    fixed = 1024 + em.smem + -(-(n_slots * 8 + n_args * 4) // 16) * 16
    qs_smem = b.stream == "smem" and (fixed + 4 * words + 2 * WS_STAGE <= SMEM_BLOCK
                                    or fixed + 4 * words <= SMEM_BLOCK and not em.bulk_ops)
    tab_bytes = -(-(n_slots * 8 + n_args * 4 + (4 * words if qs_smem else 0)) // 16) * 16
    segs = max((b - a for a, b in zip(ws_start, ws_start[1:])), default=0)
    segs = -(-segs // 8) * 8
    seg_bytes = 24 if pools else 16      # WsSeg: a pointer and two ints, two more with claims
    stages = 0
    if em.bulk_ops:
        stages = max(0, min(b.ring_stages, (SMEM_BLOCK - 1024 - em.smem - tab_bytes - seg_bytes * segs) // WS_STAGE))
    if pools and stages < 2:
        raise CodegenError(f"claim: {', '.join(pools)} take tiles through the weight ring, which this plan has no room for")
    ring_bytes = stages * WS_STAGE + seg_bytes * segs if stages > 0 else 0
    table = TaskTable(q_start, q_task, call_start, call_op, call_lo, call_hi, wait_start, wait_counter,
                      wait_target, signal_start, signal_counter, len(plan.counters), slots=dict(em.slots),
                      aliases=dict(em.base), op_ids=op_ids, call_slots=call_slots, slot_args=slot_args,
                      pf_start=pf_start, pf_slot=pf_slot, pf_offset=pf_offset, pf_bytes=pf_bytes,
                      smem_bytes=ring_bytes + tab_bytes + em.smem, call_part=call_part, scratch=dict(em.scratch),
                      ws_start=ws_start, ws_slot=ws_slot, ws_offset=ws_offset, ws_rows=ws_rows, ws_rowb=ws_rowb,
                      ws_stages=stages, q_stream=q_stream, qs_start=qs_start,
                      qs_in_smem=qs_smem, epilogues={e: [p.name for p in ps] for e, ps in em.epilogues.items()},
                      trace_words=PROBE_WORDS if b.probes else 2, ll=sorted(ll),
                      threads=(THREADS + (128 if b.maxnreg else 32)) if stages > 0 and em.producer == "warp" else THREADS,
                      maxnreg=b.maxnreg if stages > 0 and em.producer == "warp" else 0)
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
    source = (f"#define MK_PROBES {int(b.probes)}\n#define MK_CONTROL_WARP {b.control_warp}\n"
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
    if impls:
        _check_impl_names(source, impls)
    return source, table, em


def _impl_preamble() -> str:
    from megakernel_gym.compiler.impl_guard import PREAMBLE
    return PREAMBLE.replace("@WARPS@", str(WARPS))


def _check_impl_names(source: str, impls: dict[str, str]) -> None:
    """No body names what the generated source declares at file scope (its tables, helpers, macros,
    shared variables) beyond the contract's helpers: the rules that need the source."""
    from megakernel_gym.compiler.impl_guard import own_name_problem
    from megakernel_gym.compiler.impl_guard import file_scope_names
    names = file_scope_names(source)
    for name, code in impls.items():
        problem = own_name_problem(code, names)
        if problem:
            raise CodegenError(f"impl {name}: {problem}")


__all__ = ["CodegenError", "TaskTable", "emit_cuda", "THREADS", "PRODUCERS", "PREFETCH_MODES", "WEIGHT_PATHS", "IMPL_CONTRACT",
           "impl_code_problem", "SMEM_LIMIT", "onchip_norm_problem", "epilogue_ops", "attention_split_problem"]
