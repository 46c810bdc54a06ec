"""Matmul task bodies: the generic one, the streamed decode body (16-byte weight loads, the input
vector in shared memory), the weight ring's rows, and the elementwise epilogues fused into them.
"""
from __future__ import annotations

import re

from megakernel_gym.compiler.expr import parse_expr
from megakernel_gym.compiler.graph import Op
from megakernel_gym.compiler.codegen.elementwise import _c_expr
from megakernel_gym.compiler.codegen import knobs
from megakernel_gym.compiler.codegen.knobs import CodegenError, EPV, THREADS, WARPS, WS_SEG
from megakernel_gym.compiler.codegen.layout import _streams


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
    return knobs.X_PLANES and m > 1 and epv == 8     # knobs' own: bench/x_planes.py switches it


class MatmulBodies:
    """The matmul task bodies: the generic one, the streamed decode body, the weight ring's rows and
    the elementwise epilogues fused into them. A mixin of
    emitter._Emitter, whose state (the plan, the tensors' slots, the build's knobs) they read as self."""

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
