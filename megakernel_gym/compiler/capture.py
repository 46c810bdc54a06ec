"""Capture: nn.Module -> torch.export program -> Graph of primitive ops.

`capture(module, example_inputs)` exports the module (non-strict, static shapes) and maps every
node of the exported program onto PRIMITIVES, in the program's order:

    aten.linear / mm / matmul / bmm / addmm / mv      -> matmul (weight layout recorded)
    aten add / mul / silu / exp / pow / ... and casts -> elementwise, chains fused into one expr
    aten sum / mean / amax / amin                     -> reduce (one op per reduced axis)
    aten softmax, layer_norm, rms_norm, embedding     -> softmax, layernorm, rmsnorm, embedding
    aten view / reshape / permute / transpose / ...   -> view, or nothing where it is an identity
    mkgym.rmsnorm / rope / decode_attention / cache_write / moe_route -> the primitive of the same name

Anything else raises UnsupportedOpError naming the aten op and the node. Tensor names: user
inputs keep their argument names, parameters and buffers their module paths
("layers.0.attn.q_proj.weight"), activations the name of the op that makes them, and the
returned tensors are "output" (or "output.0", "output.1", ...). Op names come from the module
path that issued the node ("layers.0.attn.q_proj"; "layers.0.mlp.silu_mul" for a fused op
inside a block), made unique with a numeric suffix.

mkgym.cache_write is in place: its output is the cache buffer's own name, and ops after it read
the written cache under that name, so Graph.written_buffers() lists the state a step updates.
"""
from __future__ import annotations

import hashlib
import operator
import os
import pickle
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node

from megakernel_gym.cache_paths import user_cache_path
from megakernel_gym.compiler import ops  # noqa: F401  (registers torch.ops.mkgym.*)
from megakernel_gym.compiler.expr import VARS, count_var, format_expr, substitute
from megakernel_gym.compiler.graph import Graph, Op, TensorSpec, UnsupportedOpError

__all__ = ["capture", "capture_cached", "module_tensors"]

# Nodes that check or annotate but compute nothing.
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "_assert_async", "sym_constrain_range",
         "sym_constrain_range_for_size", "_set_grad_enabled"}

_RESHAPES = {"view", "_unsafe_view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze",
             "view_as", "reshape_as"}
_PERMUTES = {"permute", "transpose", "t", "swapaxes", "swapdims", "numpy_T"}
_IDENTITIES = {"contiguous", "clone", "alias", "detach", "lift_fresh_copy"}
_CASTS = {"to", "_to_copy", "type_as"}

_UNARY_FN = {"silu": "silu", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp",
             "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "sin": "sin",
             "cos": "cos", "erf": "erf"}
_ELEMENTWISE = set(_UNARY_FN) | {"add", "sub", "rsub", "mul", "div", "neg", "gelu", "pow",
                                 "reciprocal", "square", "maximum", "minimum", "clamp",
                                 "clamp_min", "clamp_max"}
_MATMULS = {"linear", "mm", "matmul", "bmm", "addmm", "mv"}
_REDUCES = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}


@dataclass
class _Proto:
    """An op before naming: tensors are still internal ids (fx node names or final names)."""
    kind: str
    inputs: list[str]
    output: str
    attrs: dict
    scope: str
    roles: list[str]
    source: list[str]
    tree: tuple | None = None          # elementwise expression tree until formatting
    dead: bool = False
    name: str = ""


@dataclass
class _Capture:
    program: torch.export.ExportedProgram
    specs: dict[str, tuple[tuple[int, ...], torch.dtype, str]] = field(default_factory=dict)
    name_of: dict[Node, str] = field(default_factory=dict)
    protos: list[_Proto] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    # -- helpers -------------------------------------------------------------------------------

    def fail(self, node: Node, hint: str = ""):
        scope = _scope(node)
        where = f"in module {scope!r}" if scope else "in the top-level forward"
        line = _source_line(node)
        if line:
            where += f" ({line})"
        raise UnsupportedOpError(_op_name(node), node.name,
                                 where + (f"; {hint}" if hint else ""))

    def tensor(self, value, node: Node) -> str:
        if not isinstance(value, Node) or value not in self.name_of:
            self.fail(node, f"argument {value!r} is not a tensor the graph knows")
        return self.name_of[value]

    def add(self, node: Node, kind: str, inputs: list[str], attrs: dict | None = None, *,
            role: str | None = None, output: str | None = None, tree=None,
            shape=None, dtype=None) -> str:
        out = output or node.name
        if output is None:
            val = node.meta["val"]
            self.specs[out] = (tuple(int(d) for d in (val.shape if shape is None else shape)),
                               val.dtype if dtype is None else dtype, "activation")
        self.protos.append(_Proto(kind, list(inputs), out, attrs or {}, _scope(node),
                                  [role or kind], [node.name], tree))
        self.name_of[node] = out
        return out

    def alias(self, node: Node, source) -> None:
        self.name_of[node] = self.tensor(source, node)

    # -- the walk ------------------------------------------------------------------------------

    def run(self) -> None:
        sig = self.program.graph_signature
        kinds = {}
        for spec in sig.input_specs:
            kinds[spec.arg.name] = spec
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node, kinds[node.name])
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                self.output(node, sig)
            else:
                self.fail(node, f"fx node kind {node.op!r} is not supported")

    def placeholder(self, node: Node, spec) -> None:
        val = node.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                raise ValueError(f"capture: input {node.name!r} is a {type(val).__name__}, not a "
                                 f"tensor; pass only tensors as example inputs (bake other "
                                 f"arguments into the module)")
            name, kind = node.name, "input"
            self.inputs.append(name)
        elif spec.kind == InputKind.PARAMETER:
            name, kind = spec.target, "weight"
        elif spec.kind == InputKind.BUFFER:
            name, kind = spec.target, "buffer"
        else:
            raise ValueError(f"capture: {node.name!r} is a {spec.kind.name.lower()} input; "
                             f"tensors created inside forward are not supported, register them "
                             f"with module.register_buffer(...) instead")
        if name not in self.specs:
            self.specs[name] = (tuple(int(d) for d in val.shape), val.dtype, kind)
        self.name_of[node] = name

    def output(self, node: Node, sig) -> None:
        values = node.args[0]
        for spec, value in zip(sig.output_specs, values):
            if not isinstance(value, Node):
                raise ValueError(f"capture: the module returns {value!r}, not a tensor; return "
                                 f"only tensors")
            if spec.kind != OutputKind.USER_OUTPUT:
                raise UnsupportedOpError(f"output kind {spec.kind.name}", value.name,
                                         "the module mutates a tensor outside mkgym.cache_write")
            self.outputs.append(self.name_of[value])

    def call(self, node: Node) -> None:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            name = getattr(target, "__name__", str(target))
            if name in _SKIP:
                return
            if target is operator.getitem:
                self.fail(node, "multi-output ops are not supported")
            self.fail(node)
        ns, packet = target.namespace, target.overloadpacket.__name__
        if packet in _SKIP:
            return
        if ns == "mkgym":
            return self.custom(node, packet)
        if ns != "aten":
            self.fail(node)
        inplace = packet.endswith("_") and not packet.startswith("_")
        base = packet[:-1] if inplace else packet
        if inplace and base not in _ELEMENTWISE:
            self.fail(node, "in-place updates are only supported for elementwise ops; write KV "
                            "caches with torch.ops.mkgym.cache_write")
        args = _bind(node)
        if base in _MATMULS:
            return self.matmul(node, base, args)
        overload = target._overloadname
        if base in _ELEMENTWISE or (base in ("max", "min") and overload == "other"):
            return self.elementwise(node, base, args, inplace)
        if base in _REDUCES or (base in ("max", "min") and overload == "default"):
            return self.reduce(node, base, args)
        if base in _RESHAPES | _PERMUTES | _IDENTITIES | _CASTS | {"expand", "expand_as", "slice",
                                                                   "select"}:
            return self.view(node, base, args)
        if base == "dropout" and not args["train"]:
            return self.alias(node, args["input"])
        if base in ("softmax", "_softmax"):
            x = self.tensor(args["self"], node)
            if base == "_softmax" and args["half_to_float"]:
                self.fail(node, "half_to_float softmax is not supported")
            self.add(node, "softmax", [x], {"axis": _axis(args["dim"], node)})
            return
        if base == "layer_norm":
            return self.layer_norm(node, args)
        if base == "rms_norm":
            return self.rms_norm(node, args)
        if base == "embedding":
            self.add(node, "embedding", [self.tensor(args["indices"], node),
                                         self.tensor(args["weight"], node)])
            return
        if base == "scaled_dot_product_attention":
            self.fail(node, "attention over a KV cache is torch.ops.mkgym.decode_attention")
        self.fail(node)

    # -- handlers ------------------------------------------------------------------------------

    def custom(self, node: Node, packet: str) -> None:
        args = _bind(node)
        t = lambda k: self.tensor(args[k], node)   # noqa: E731
        if packet == "rmsnorm":
            self.add(node, "rmsnorm", [t("x"), t("w")], {"eps": float(args["eps"])})
        elif packet == "rope":
            self.add(node, "rope", [t("x"), t("pos")], {"theta": float(args["theta"])})
        elif packet == "decode_attention":
            attrs = {"scale": float(args["scale"])}
            if int(args.get("window", 0)):     # only a sliding window is written: full attention's IR is as before
                attrs["window"] = int(args["window"])
            self.add(node, "decode_attention", [t("q"), t("k_cache"), t("v_cache"), t("pos")], attrs)
        elif packet == "moe_route":
            self.add(node, "moe_route", [t("logits")], {"top_k": int(args["top_k"]), "expert": int(args["expert"])})
        elif packet == "cache_write":
            cache = t("cache")
            if self.specs[cache][2] not in ("buffer", "activation"):
                self.fail(node, f"cache_write must target a buffer, not the {self.specs[cache][2]} "
                                f"{cache!r}; register the cache with register_buffer")
            leaf = cache.rsplit(".", 1)[-1]
            self.add(node, "cache_write", [cache, t("new"), t("pos")], output=cache,
                     role=f"{leaf}_write")
        else:
            self.fail(node)

    def matmul(self, node: Node, base: str, args: dict) -> None:
        if base == "linear":
            x, w, b = args["input"], args["weight"], args.get("bias")
            layout = "NK"
        elif base == "addmm":
            if args["beta"] != 1 or args["alpha"] != 1:
                self.fail(node, "addmm with beta or alpha other than 1 is not supported")
            x, w, b = args["mat1"], args["mat2"], args["self"]
            layout = "KN"
        else:
            x = args["self"]
            w = args.get("mat2", args.get("other", args.get("vec")))
            b, layout = None, "KN"
        if layout == "KN":
            # x @ W.t() is how a hand-written linear reaches aten: read W in its stored [N, K]
            # layout instead of materializing the transpose.
            stored = self.transposed_weight(w)
            if stored is not None:
                w, layout = stored, "NK"
        inputs = [self.tensor(x, node), self.tensor(w, node)]
        if b is not None:
            inputs.append(self.tensor(b, node))
        self.add(node, "matmul", inputs, {"bias": b is not None, "w_layout": layout},
                 role="matmul")

    def transposed_weight(self, w) -> Node | None:
        if not isinstance(w, Node) or w.op != "call_function" or \
                not isinstance(w.target, torch._ops.OpOverload):
            return None
        packet = w.target.overloadpacket.__name__
        src = w.args[0]
        if not isinstance(src, Node) or src not in self.name_of or \
                self.specs[self.name_of[src]][2] not in ("weight", "buffer") or \
                len(self.specs[self.name_of[src]][0]) != 2:
            return None
        if packet == "t":
            return src
        if packet == "transpose" and sorted(d % 2 for d in w.args[1:3]) == [0, 1]:
            return src
        if packet == "permute" and [d % 2 for d in w.args[1]] == [1, 0]:
            return src
        return None

    def elementwise(self, node: Node, base: str, args: dict, inplace: bool) -> None:
        inputs: list[str] = []

        def v(x):
            if isinstance(x, Node):
                name = self.tensor(x, node)
                if name not in inputs:
                    inputs.append(name)
                return ("var", VARS[inputs.index(name)])
            if isinstance(x, bool):
                return ("num", int(x))
            if isinstance(x, (int, float)):
                return ("num", x)
            self.fail(node, f"argument {x!r} is neither a tensor nor a number")

        def scaled(x, alpha):
            return v(x) if alpha == 1 else ("bin", "*", ("num", alpha), v(x))

        a = args.get("self")
        if base == "add":
            tree = ("bin", "+", v(a), scaled(args["other"], args.get("alpha", 1)))
        elif base == "sub":
            tree = ("bin", "-", v(a), scaled(args["other"], args.get("alpha", 1)))
        elif base == "rsub":
            tree = ("bin", "-", v(args["other"]), scaled(a, args.get("alpha", 1)))
        elif base == "mul":
            tree = ("bin", "*", v(a), v(args["other"]))
        elif base == "div":
            if args.get("rounding_mode") is not None:
                self.fail(node, "division with a rounding mode is not supported")
            tree = ("bin", "/", v(a), v(args["other"]))
        elif base == "neg":
            tree = ("neg", v(a))
        elif base == "reciprocal":
            tree = ("bin", "/", ("num", 1), v(a))
        elif base == "square":
            tree = ("bin", "**", v(a), ("num", 2))
        elif base == "pow":
            tree = ("bin", "**", v(args["self"]), v(args["exponent"]))
        elif base == "gelu":
            tree = ("call", "gelu_tanh" if args.get("approximate") == "tanh" else "gelu", (v(a),))
        elif base in ("maximum", "max"):
            tree = ("call", "max", (v(a), v(args["other"])))
        elif base in ("minimum", "min"):
            tree = ("call", "min", (v(a), v(args["other"])))
        elif base in ("clamp", "clamp_min", "clamp_max"):
            lo = args.get("min") if base != "clamp_max" else None
            hi = args.get("max") if base != "clamp_min" else None
            tree = v(a)
            if hi is not None:
                tree = ("call", "min", (tree, v(hi)))
            if lo is not None:
                tree = ("call", "max", (tree, v(lo)))
        else:
            tree = ("call", _UNARY_FN[base], (v(a),))
        if len(inputs) == 0:
            self.fail(node, "an elementwise op needs at least one tensor input")
        out = self.add(node, "elementwise", inputs, role=base, tree=tree)
        self.name_of[node] = out
        if inplace:
            self.rebind_inplace(node, args["self"], out)

    def rebind_inplace(self, node: Node, target: Node, out: str) -> None:
        # An in-place update on an activation is the same as an out-of-place op whose result
        # takes the old tensor's place for every later reader, unless a view of the old tensor
        # could observe the write.
        name = self.tensor(target, node)
        if self.specs[name][2] != "activation":
            self.fail(node, f"in-place update of the {self.specs[name][2]} {name!r}; compute a "
                            f"new tensor instead")
        for user in target.users:
            if user is not node and isinstance(user.target, torch._ops.OpOverload) and \
                    user.target.overloadpacket.__name__ in _RESHAPES | _PERMUTES | {
                        "expand", "slice", "select"}:
                self.fail(node, "in-place update of a tensor that has views; compute a new "
                                "tensor instead")
        self.name_of[target] = out

    def reduce(self, node: Node, base: str, args: dict) -> None:
        x = self.tensor(args["self"], node)
        shape = list(self.specs[x][0])
        dims = args.get("dim")
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(len(shape)))
        elif isinstance(dims, int):
            dims = [dims]
        dims = sorted({_axis(d, node, len(shape)) for d in dims}, reverse=True)
        keepdim = bool(args.get("keepdim", False))
        op = _REDUCES.get(base, base)
        out_dtype = node.meta["val"].dtype
        # One op per axis, innermost first, so the remaining axis numbers stay valid when
        # keepdim drops them.
        cur = x
        for i, d in enumerate(dims):
            if keepdim:
                shape[d] = 1
            else:
                shape.pop(d)
            attrs = {"op": op, "axis": d, "keepdim": keepdim}
            if i == len(dims) - 1:
                cur = self.add(node, "reduce", [cur], attrs, role=op, shape=tuple(shape),
                               dtype=out_dtype)
            else:
                partial = f"{node.name}.{i}"
                self.specs[partial] = (tuple(shape), out_dtype, "activation")
                self.protos.append(_Proto("reduce", [cur], partial, attrs, _scope(node), [op],
                                          [node.name]))
                cur = partial
        self.name_of[node] = cur

    def layer_norm(self, node: Node, args: dict) -> None:
        if len(args["normalized_shape"]) != 1:
            self.fail(node, "layer_norm over more than the last dimension is not supported")
        inputs = [self.tensor(args["input"], node)]
        for key in ("weight", "bias"):
            if args.get(key) is not None:
                inputs.append(self.tensor(args[key], node))
        self.add(node, "layernorm", inputs, {"eps": float(args["eps"]),
                                             "weight": args.get("weight") is not None,
                                             "bias": args.get("bias") is not None})

    def rms_norm(self, node: Node, args: dict) -> None:
        if len(args["normalized_shape"]) != 1:
            self.fail(node, "rms_norm over more than the last dimension is not supported")
        x = self.tensor(args["input"], node)
        eps = args.get("eps")
        if eps is None:
            eps = torch.finfo(self.specs[x][1]).eps
        inputs = [x] + ([self.tensor(args["weight"], node)] if args.get("weight") is not None
                        else [])
        self.add(node, "rmsnorm", inputs, {"eps": float(eps)})

    def view(self, node: Node, base: str, args: dict) -> None:
        x = self.tensor(args["self"], node)
        in_shape, in_dtype, _ = self.specs[x]
        val = node.meta["val"]
        out_shape = tuple(int(d) for d in val.shape)
        if base in _IDENTITIES:
            return self.alias(node, args["self"])
        if base in _CASTS:
            if val.device != args["self"].meta["val"].device:
                self.fail(node, "moving tensors between devices inside forward is not supported")
            if val.dtype == in_dtype:
                return self.alias(node, args["self"])
            self.name_of[node] = self.add(node, "elementwise", [x], role="cast", tree=("var", "a"))
            return
        if base in _RESHAPES:
            if out_shape == in_shape:
                return self.alias(node, args["self"])
            attrs = {"op": "reshape", "args": list(out_shape)}
        elif base in _PERMUTES:
            n = len(in_shape)
            if base == "permute":
                perm = [d % n for d in args["dims"]]
            elif base == "numpy_T":
                perm = list(range(n))[::-1]
            else:
                d0, d1 = (0, 1) if base == "t" else (args.get("dim0", args.get("axis0")) % n,
                                                     args.get("dim1", args.get("axis1")) % n)
                perm = list(range(n))
                if n >= 2:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
            if perm == list(range(n)):
                return self.alias(node, args["self"])
            attrs = {"op": "permute", "args": perm}
        elif base in ("expand", "expand_as"):
            if out_shape == in_shape:
                return self.alias(node, args["self"])
            attrs = {"op": "expand", "args": list(out_shape)}
        elif base == "slice":
            dim = _axis(args.get("dim", 0), node, len(in_shape))
            size = in_shape[dim]
            start, end, step = args.get("start"), args.get("end"), args.get("step", 1)
            start, end, _ = slice(start, end, step).indices(size)
            if start == 0 and end == size and step == 1:
                return self.alias(node, args["self"])
            attrs = {"op": "slice", "args": [dim, start, end, step]}
        else:  # select
            dim = _axis(args["dim"], node, len(in_shape))
            attrs = {"op": "select", "args": [dim, int(args["index"]) % in_shape[dim]]}
        self.name_of[node] = self.add(node, "view", [x], attrs, role=attrs["op"])


# ---------------------------------------------------------------------------------------------
# Node helpers

def _op_name(node: Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target.overloadpacket.__name__}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _scope(node: Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else ""


def _source_line(node: Node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _bind(node: Node) -> dict:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    out = {}
    positional = list(node.args)
    for i, arg in enumerate(schema.arguments):
        if i < len(positional) and not arg.kwarg_only:
            out[arg.name] = positional[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _axis(d: int, node: Node, rank: int | None = None) -> int:
    if rank is None:
        rank = len(node.args[0].meta["val"].shape)
    if not -rank <= d < max(rank, 1):
        raise ValueError(f"capture: axis {d} out of range for a rank-{rank} tensor at node "
                         f"{node.name!r}")
    return d % max(rank, 1)


# ---------------------------------------------------------------------------------------------
# Passes over protos

_NARROW = {torch.float16, torch.bfloat16}


def _fuse_elementwise(cap: _Capture) -> None:
    """Fold an elementwise producer into its elementwise consumer when it has no other reader.

    Kept apart: producers that read a tensor some op writes in place (moving the read later
    could see the write), graph outputs, producers used more than once inside the consumer's
    expression (fusing would compute them twice), and pure casts to a 16-bit float, whose
    rounding is the point of the cast.
    """
    producer = {p.output: p for p in cap.protos}
    uses = Counter(t for p in cap.protos for t in p.inputs)
    uses.update(cap.outputs)
    written = {p.output for p in cap.protos if p.kind == "cache_write"}
    for c in cap.protos:
        if c.kind != "elementwise":
            continue
        changed = True
        while changed:
            changed = False
            for i, t in enumerate(c.inputs):
                p = producer.get(t)
                if p is None or p.dead or p.kind != "elementwise" or uses[t] != 1:
                    continue
                if set(p.inputs) & written:
                    continue
                if p.tree == ("var", "a") and cap.specs[t][1] in _NARROW:
                    continue
                if count_var(c.tree, VARS[i]) != 1:
                    continue
                merged, mapping = [], {}
                for j, name in enumerate(c.inputs):
                    if j == i:
                        sub = {}
                        for k, pin in enumerate(p.inputs):
                            if pin not in merged:
                                merged.append(pin)
                            sub[VARS[k]] = ("var", VARS[merged.index(pin)])
                        mapping[VARS[j]] = substitute(p.tree, sub)
                    else:
                        if name not in merged:
                            merged.append(name)
                        mapping[VARS[j]] = ("var", VARS[merged.index(name)])
                if len(merged) > len(VARS):
                    continue
                for name in set(c.inputs) | set(p.inputs):
                    uses[name] -= c.inputs.count(name) + p.inputs.count(name) - \
                        (1 if name in merged else 0)
                c.tree = substitute(c.tree, mapping)
                c.inputs = merged
                c.roles = p.roles + c.roles
                c.source = p.source + c.source
                p.dead = True
                changed = True
                break


def _fold_reshapes(cap: _Capture) -> None:
    """reshape(reshape(x)) -> reshape(x) when the middle tensor has no other reader."""
    producer = {p.output: p for p in cap.protos}
    uses = Counter(t for p in cap.protos if not p.dead for t in p.inputs)
    uses.update(cap.outputs)
    for c in cap.protos:
        if c.dead or c.kind != "view" or c.attrs["op"] != "reshape":
            continue
        p = producer.get(c.inputs[0])
        while p is not None and not p.dead and p.kind == "view" and p.attrs["op"] == "reshape" \
                and uses[p.output] == 1:
            c.inputs = list(p.inputs)
            c.source = p.source + c.source
            p.dead = True
            p = producer.get(c.inputs[0])


def _eliminate_dead(cap: _Capture) -> None:
    live = set(cap.outputs)
    for p in reversed(cap.protos):
        if p.dead:
            continue
        # In-place writes (output is a buffer, not a fresh activation) are the step's effect.
        if p.output in live or cap.specs[p.output][2] != "activation":
            live.update(p.inputs)
        else:
            p.dead = True


def _name_ops(cap: _Capture) -> dict[str, str]:
    """Final op names; returns the activation renaming (internal id -> op name)."""
    protos = [p for p in cap.protos if not p.dead]
    per_scope = Counter(p.scope for p in protos)
    taken = {n for n, s in cap.specs.items() if s[2] != "activation"}
    stems: dict[str, str] = {}
    rename: dict[str, str] = {}
    for p in protos:
        role = "_".join(dict.fromkeys(p.roles)) if p.kind == "elementwise" else p.roles[-1]
        if p.kind == "elementwise" and len(dict.fromkeys(p.roles)) > 3:
            role = "_".join(list(dict.fromkeys(p.roles))[:3]) + "_etc"
        if p.kind in ("view", "rope"):
            stem = stems.get(rename.get(p.inputs[0], p.inputs[0]))
            if stem:
                role = f"{stem}_{role}"
        base = p.scope if p.scope and per_scope[p.scope] == 1 else \
            (f"{p.scope}.{role}" if p.scope else role)
        name, i = base, 0
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        p.name = name
        leaf = (p.scope or "").rsplit(".", 1)[-1]
        if p.kind == "matmul" and leaf.endswith("_proj") and len(leaf) > 5:
            stems[name] = leaf[:-5]
        elif p.kind in ("view", "rope") and stems.get(rename.get(p.inputs[0], p.inputs[0])):
            stems[name] = stems[rename.get(p.inputs[0], p.inputs[0])]
        if cap.specs[p.output][2] == "activation":
            rename[p.output] = name
    return rename


def capture(module: nn.Module, example_inputs, name: str | None = None) -> Graph:
    """Export `module` on `example_inputs` and map it onto the primitive op set.

    Shapes are static (those of example_inputs). Raises UnsupportedOpError for a node outside
    the primitive set. The module's buffers are not modified.
    """
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__
    with torch.no_grad():
        program = torch.export.export(module, tuple(example_inputs), strict=False)
    cap = _Capture(program)
    cap.run()
    _fuse_elementwise(cap)
    _fold_reshapes(cap)
    _eliminate_dead(cap)
    rename = _name_ops(cap)

    # Returned activations become output / output.N; an activation returned twice keeps one name.
    taken = set(rename.values()) | {t for t, s in cap.specs.items() if s[2] != "activation"}
    out_names = {}
    user_outputs = []
    for i, t in enumerate(cap.outputs):
        if cap.specs[t][2] == "activation" and t not in out_names:
            out = "output" if len(cap.outputs) == 1 else f"output.{i}"
            while out in taken:          # a user input or op already called "output"
                out += "_"
            out_names[t] = out
            taken.add(out)
        user_outputs.append(out_names.get(t, t))
    final = {t: out_names.get(t, rename.get(t, t)) for t in cap.specs}

    tensors: dict[str, TensorSpec] = {}
    order = sorted((t for t, s in cap.specs.items() if s[2] != "activation"),
                   key=lambda t: ("input", "weight", "buffer").index(cap.specs[t][2]))
    for t in order:
        shape, dtype, kind = cap.specs[t]
        tensors[t] = TensorSpec(t, shape, _dtype_name(dtype), kind)
    graph_ops = []
    for p in cap.protos:
        if p.dead:
            continue
        attrs = dict(p.attrs)
        if p.kind == "elementwise":
            attrs["expr"] = format_expr(p.tree)
        out = final[p.output]
        shape, dtype, kind = cap.specs[p.output]
        if kind == "activation":
            tensors[out] = TensorSpec(out, shape, _dtype_name(dtype),
                                      "output" if p.output in out_names else "activation")
        graph_ops.append(Op(p.name, p.kind, [final[t] for t in p.inputs], [out], attrs,
                            source=",".join(p.source)))
    # Keep only placeholders the graph reads (a parameter the forward never uses is not state).
    read = {t for o in graph_ops for t in o.inputs} | set(user_outputs) | set(cap.inputs)
    tensors = {t: s for t, s in tensors.items() if s.kind == "activation" or s.kind == "output"
               or t in read}
    return Graph(name, tensors, graph_ops, list(cap.inputs), user_outputs)


def _graph_cache_dir() -> Path:
    return user_cache_path("MKGYM_GRAPH_CACHE", "graphs")


def _compiler_source_hash() -> str:
    """The compiler package's sources (and torch's version): a graph captured by other code is
    another graph. Hashed once per process."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        h = hashlib.sha256(torch.__version__.encode())
        for f in sorted(Path(__file__).parent.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        _SOURCE_HASH = h.hexdigest()
    return _SOURCE_HASH


_SOURCE_HASH: str | None = None


def capture_cached(key: str, build: Callable[[], tuple[nn.Module, tuple]], name: str) -> Graph:
    """capture(*build(), name), kept on disk under `key` (what determines the module and its
    example inputs' shapes, e.g. a problem file's sha256 and its config) and the compiler's own
    sources: a 1B-shaped model takes ~2.5 s to build on the meta device and export, its pickled
    Graph ~1 ms to load. The cache is the user's cache dir (MKGYM_GRAPH_CACHE overrides it); a file
    that does not load as a Graph of that name is captured again and replaced, and a cache that
    cannot be written is skipped."""
    digest = hashlib.sha256(f"{key}\0{name}\0{_compiler_source_hash()}".encode()).hexdigest()
    path = _graph_cache_dir() / f"{digest}.pickle"
    try:
        # our own file in the user's cache dir, written below: trusted as the cubin cache is
        graph = pickle.loads(path.read_bytes())
        if isinstance(graph, Graph) and graph.name == name:
            return graph
    except Exception:  # noqa: BLE001 - missing, truncated or stale: capture again
        pass
    graph = capture(*build(), name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)              # atomic: a reader sees the old file or the whole new one
    except OSError:
        pass
    return graph


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by the names capture gives them (run_graph's `params`).

    Every alias of a tied weight is listed: torch.export names a shared parameter after one of
    its owners, not necessarily the first.
    """
    out = dict(module.named_parameters(remove_duplicate=False))
    out.update(module.named_buffers(remove_duplicate=False))
    return out
