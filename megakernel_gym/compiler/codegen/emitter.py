"""The emitter: one plan's tensors, slots and knobs, and each op's device function (op_body dispatches
to the bodies of matmul.py, elementwise.py and attention.py, or takes an `impl` body).
"""
from __future__ import annotations

import re
import textwrap

from megakernel_gym.compiler.graph import Op
from megakernel_gym.compiler.hops import LL_WORD_BYTES
from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import INLINE
from megakernel_gym.compiler.codegen.attention import AttentionBodies
from megakernel_gym.compiler.codegen.elementwise import ElementwiseBodies
from megakernel_gym.compiler.codegen.knobs import CTYPES, CodegenError, EPV, ESIZE, LL_CTYPES, SMEM_LIMIT, X_BF16
from megakernel_gym.compiler.codegen.layout import _bases, _numel, _streams, attention_inputs, onchip_norm_problem
from megakernel_gym.compiler.codegen.matmul import MatmulBodies


class _Emitter(MatmulBodies, ElementwiseBodies, AttentionBodies):
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
