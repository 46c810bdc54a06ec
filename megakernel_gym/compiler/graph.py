"""Graph IR: a whole model as a list of primitive ops over named tensors.

This is the first stage of the compiler pipeline (model -> graph IR -> tile task graph ->
schedule -> megakernel | CPU VM). Everything downstream sees only these primitives, so the
set is small and each op's semantics are defined once, by `reference_op`, in plain PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The primitive op set; megakernel_gym.compiler.interpret.reference_op defines each in PyTorch.
#   matmul            attrs: {"bias": bool, "w_layout": "NK"|"KN"}; inputs [x, w(, b)]
#                     NK: y = x @ w^T (w stored [N, K], nn.Linear); KN: y = x @ w (batched like
#                     torch.matmul; also activation @ activation)
#   elementwise       y = expr(a, b, ...)   attrs: {"expr": "silu(a) * b"} over inputs a, b, c...
#                     (language: compiler/expr.py; computed in fp32, cast once; broadcasting)
#   reduce            attrs: {"op": "sum"|"mean"|"max"|"min", "axis": int, "keepdim": bool}
#   rmsnorm           y = x * rsqrt(mean(x^2, -1) + eps) * w   attrs: {"eps": float}; inputs [x, w]
#                     ([x] alone where the model's norm has no weight)
#   layernorm         over the last dim   attrs: {"eps", "weight": bool, "bias": bool};
#                     inputs [x(, w)(, b)] as the flags say
#   softmax           attrs: {"axis": int}
#   rope              rotary embedding, half-rotation (Llama) layout, x [B, H, D], pos [B]
#                     attrs: {"theta": float}; inputs [x, pos]
#   decode_attention  one new token per sequence attends over cache slots 0..pos[b] (with a
#                     sliding window W, the last W of them), grouped query heads (head h reads
#                     kv head h // (Hq/Hkv)); inputs [q, k_cache, v_cache, pos];
#                     attrs: {"scale": float(, "window": int > 0)}
#   cache_write       cache[b, :, pos[b]] = new[b], in place: inputs [cache, new, pos], and the
#                     output is the cache's own name (ops after it read the written cache)
#   embedding         inputs [ids, table]
#   moe_route         one expert's router weight per row, [B, 1] float32: softmax of the logits
#                     [B, E], top_k renormalized, 0 outside them; attrs {"top_k", "expert"}
#   view              attrs: {"op": "reshape"|"permute"|"expand"|"slice"|"select", "args": [...]}
#                     reshape: the output shape; permute: the dims; expand: the output shape;
#                     slice: [dim, start, end, step]; select: [dim, index]
PRIMITIVES = ("matmul", "elementwise", "reduce", "rmsnorm", "layernorm", "softmax", "rope",
              "decode_attention", "cache_write", "embedding", "view", "moe_route")

TENSOR_KINDS = ("input", "weight", "buffer", "activation", "output")


class UnsupportedOpError(ValueError):
    """A node of the captured program that the primitive set cannot express."""

    def __init__(self, op: str, node: str, hint: str = ""):
        self.op, self.node = op, node
        super().__init__(f"unsupported op {op} at node {node!r}" + (f": {hint}" if hint else "")
                         + f"; the primitive ops are: {', '.join(PRIMITIVES)}")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str            # "float32", "bfloat16", "int64", ...
    kind: str             # one of TENSOR_KINDS

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class Op:
    name: str             # unique and stable, e.g. "layers.0.attn_norm"
    kind: str             # one of PRIMITIVES
    inputs: list[str]     # tensor names
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    source: str = ""      # the torch.export node(s) it came from, for messages

    def __post_init__(self):
        if self.kind not in PRIMITIVES:
            raise ValueError(f"op {self.name}: unknown primitive {self.kind!r}")


@dataclass
class Graph:
    name: str
    tensors: dict[str, TensorSpec]
    ops: list[Op]         # in a valid execution order
    inputs: list[str]
    outputs: list[str]

    def op(self, name: str) -> Op:
        # an index by name, built on first use and checked on every hit, so a list changed since
        # still answers right (codegen and the cost model look ops up by name tens of thousands of
        # times a plan: a scan of the list was a fifth of emit_cuda's time)
        index = self.__dict__.get("_op_index")
        i = index.get(name) if index is not None else None
        if i is not None and i < len(self.ops) and self.ops[i].name == name:
            return self.ops[i]
        self.__dict__["_op_index"] = index = {o.name: i for i, o in enumerate(self.ops)}
        if name in index:
            return self.ops[index[name]]
        raise KeyError(f"no op named {name!r}; ops: {', '.join(o.name for o in self.ops[:20])}"
                       + (" ..." if len(self.ops) > 20 else ""))

    def producers(self) -> dict[str, str]:
        """Tensor name -> the op that writes it last."""
        out = {}
        for o in self.ops:
            for t in o.outputs:
                out[t] = o.name
        return out

    def written_buffers(self) -> list[str]:
        """Non-activation tensors some op writes in place (a step's state: the KV caches)."""
        out = []
        for o in self.ops:
            for t in o.outputs:
                spec = self.tensors.get(t)
                if spec is not None and spec.kind in ("buffer", "weight", "input") and t not in out:
                    out.append(t)
        return out
