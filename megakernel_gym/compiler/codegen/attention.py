"""KV-cache write and decode-attention task bodies: one task a tile, split over cached positions
(the parts' partials and their combine), and with this step's q, k and v staged in the attention.
"""
from __future__ import annotations

import textwrap

from megakernel_gym.compiler.graph import Op
from megakernel_gym.compiler.codegen.knobs import CTYPES, CodegenError, EPV, ESIZE, THREADS, WARPS
from megakernel_gym.compiler.codegen.layout import _attention_parallel, attention_split_problem


class AttentionBodies:
    """The KV-cache write and decode-attention task bodies: whole, split over positions (partials
    and their combine) and with this step's q, k, v staged in them. A mixin of
    emitter._Emitter, whose state (the plan, the tensors' slots, the build's knobs) they read as self."""

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
