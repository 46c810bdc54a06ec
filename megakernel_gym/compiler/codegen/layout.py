"""What the emitter needs to know of a plan before writing a line: the task table the runtime uploads
(TaskTable), which tensor's memory each view uses, and which matmuls, norms and attentions can take the
streamed, on-chip and split bodies.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from megakernel_gym.compiler.graph import Graph, Op
from megakernel_gym.compiler.codegen.knobs import CodegenError, EPV, SMEM_LIMIT, THREADS, WARPS


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
