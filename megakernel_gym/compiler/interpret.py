"""The Graph IR's semantics, executed op by op in plain PyTorch.

`reference_op` defines what each primitive computes; `run_graph` runs a whole Graph with it.
Every later stage (tile task graph, CPU VM, CUDA megakernel) is checked against run_graph.

Precision, per primitive: matmul, embedding and views run in the tensors' own dtype (as
PyTorch does); elementwise evaluates its whole expression in float32 (float64 if an input is)
and casts once; reduce, softmax and the norms compute in float32 and cast back; rope and
decode_attention follow ops.py. Every result is cast to its TensorSpec's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from megakernel_gym.compiler.expr import evaluate
from megakernel_gym.compiler.graph import Graph, Op, TensorSpec
from megakernel_gym.compiler.ops import (cache_write_ref, decode_attention_ref, moe_route_ref, rmsnorm_ref,
                                         rope_ref)

__all__ = ["run_graph", "reference_op"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "float16": torch.float16, "int64": torch.int64, "int32": torch.int32,
           "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(_DTYPES)}") from None


def _float_math(x: Tensor) -> Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def reference_op(op: Op, args: list[Tensor], out: TensorSpec) -> Tensor | None:
    """What `op` computes from its input tensors. cache_write writes args[0] in place."""
    a = op.attrs
    dtype = torch_dtype(out.dtype)
    k = op.kind
    if k == "matmul":
        x, w = args[0], args[1]
        b = args[2] if a.get("bias") else None
        if a.get("w_layout", "NK") == "NK":
            y = F.linear(x, w, b)
        else:
            y = torch.matmul(x, w)
            if b is not None:
                y = y + b
        return y.to(dtype)
    if k == "elementwise":
        return evaluate(a["expr"], args, dtype)
    if k == "reduce":
        x = _float_math(args[0])
        fn = {"sum": torch.sum, "mean": torch.mean}.get(a["op"])
        if fn is not None:
            y = fn(x, dim=a["axis"], keepdim=a["keepdim"])
        elif a["op"] in ("max", "min"):
            y = (torch.amax if a["op"] == "max" else torch.amin)(x, dim=a["axis"],
                                                                keepdim=a["keepdim"])
        else:
            raise ValueError(f"op {op.name}: unknown reduce op {a['op']!r}; use sum, mean, max "
                             f"or min")
        return y.to(dtype)
    if k == "rmsnorm":
        return rmsnorm_ref(args[0], args[1] if len(args) > 1 else None, a["eps"]).to(dtype)
    if k == "layernorm":
        x = args[0]
        rest = iter(args[1:])
        w = next(rest) if a.get("weight", len(args) > 1) else None
        b = next(rest) if a.get("bias", len(args) > 2) else None
        y = F.layer_norm(x.float(), (x.shape[-1],), None if w is None else w.float(),
                         None if b is None else b.float(), a["eps"])
        return y.to(dtype)
    if k == "softmax":
        return torch.softmax(_float_math(args[0]), dim=a["axis"]).to(dtype)
    if k == "rope":
        return rope_ref(args[0], args[1], a["theta"]).to(dtype)
    if k == "decode_attention":
        return decode_attention_ref(*args[:4], a["scale"], int(a.get("window", 0))).to(dtype)
    if k == "moe_route":
        return moe_route_ref(args[0], int(a["top_k"]), int(a["expert"])).to(dtype)
    if k == "cache_write":
        cache_write_ref(args[0], args[1], args[2])
        return None
    if k == "embedding":
        return F.embedding(args[0], args[1]).to(dtype)
    if k == "view":
        x, v = args[0], a["args"]
        if a["op"] == "reshape":
            return x.reshape(v)
        if a["op"] == "permute":
            return x.permute(v)
        if a["op"] == "expand":
            return x.expand(v)
        if a["op"] == "slice":
            dim, start, end, step = v
            return x[(slice(None),) * dim + (slice(start, end, step),)]
        if a["op"] == "select":
            return x.select(v[0], v[1])
        raise ValueError(f"op {op.name}: unknown view op {a['op']!r}; use reshape, permute, "
                         f"expand, slice or select")
    raise ValueError(f"op {op.name}: unknown primitive {k!r}")


def bind_tensors(graph: Graph, params: dict[str, Tensor], inputs: dict[str, Tensor], who: str,
                 skip=()) -> dict[str, Tensor]:
    """The graph's inputs, weights and buffers taken from the caller, checked against its
    TensorSpecs. Buffers the graph writes (KV caches) are copied: the caller's stay untouched."""
    env: dict[str, Tensor] = {}
    written = set(graph.written_buffers())
    for name, spec in graph.tensors.items():
        if spec.kind in ("activation", "output") or name in skip:
            continue
        source, what = (inputs, "inputs") if spec.kind == "input" else (params, "params")
        if name not in source:
            raise KeyError(f"{who}: {what} has no tensor {name!r} ({spec.kind} "
                           f"{list(spec.shape)} {spec.dtype}); pass "
                           + ("it in inputs" if spec.kind == "input" else
                              "capture.module_tensors(module)"))
        t = source[name]
        if tuple(t.shape) != spec.shape or t.dtype != torch_dtype(spec.dtype):
            raise ValueError(f"{who}: {name!r} is {list(t.shape)} {t.dtype}, the graph "
                             f"expects {list(spec.shape)} {spec.dtype}")
        env[name] = t.detach().clone() if name in written else t.detach()
    return env


def run_graph(graph: Graph, params: dict[str, Tensor], inputs: dict[str, Tensor]
              ) -> dict[str, Tensor]:
    """Execute `graph` and return its outputs by name, plus the buffers it writes.

    params: every weight and buffer the graph reads, by name (capture.module_tensors(module)
    gives them). inputs: the graph's inputs by name. Neither is modified: a buffer the graph
    writes (a KV cache) is copied first, and its new value is returned under its own name, so
    feeding the result back as params runs the next decode step.
    """
    env: dict[str, Tensor] = bind_tensors(graph, params, inputs, "run_graph")
    for op in graph.ops:
        try:
            args = [env[t] for t in op.inputs]
        except KeyError as e:
            raise ValueError(f"run_graph: op {op.name} reads {e.args[0]!r} before any op "
                             f"writes it; the graph's op order is invalid") from None
        out_spec = graph.tensors[op.outputs[0]]
        result = reference_op(op, args, out_spec)
        if result is None:            # in place: the output names the written input
            continue
        if tuple(result.shape) != out_spec.shape:
            raise RuntimeError(f"run_graph: op {op.name} ({op.kind}) made shape "
                               f"{list(result.shape)}, its TensorSpec says {list(out_spec.shape)}")
        env[op.outputs[0]] = result
    out = {name: env[name] for name in graph.outputs}
    out.update({name: env[name] for name in graph.written_buffers()})
    return out
