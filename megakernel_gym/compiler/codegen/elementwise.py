"""Elementwise, embedding, norm, rope and MoE-routing task bodies, the box loops they share, and the
expression trees of elementwise ops written as C (_c_expr).
"""
from __future__ import annotations

import textwrap

from megakernel_gym.compiler.expr import parse_expr
from megakernel_gym.compiler.graph import Op
from megakernel_gym.compiler.codegen.knobs import CodegenError, WARPS
from megakernel_gym.compiler.codegen.layout import _strides


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


class ElementwiseBodies:
    """The elementwise, embedding, norm, rope and routing task bodies, and the box loops they share. A mixin of
    emitter._Emitter, whose state (the plan, the tensors' slots, the build's knobs) they read as self."""

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
