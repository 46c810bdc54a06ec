"""The work a decode step's ops must do, whatever the schedule: the bytes of a tensor region, the flops of an
output region (and the true bytes of the ops that touch less than their region: one cache row written, the
embedding rows gathered), the KV-cache positions an attention attends, and `required_bytes`, the floor any
plan's task bytes stay above. The cost model (costmodel.py) prices tasks with these.
"""
from __future__ import annotations

from megakernel_gym.compiler.interpret import torch_dtype


def _nbytes(g, tensor: str, box) -> int:
    spec = g.tensors[tensor]
    n = 1
    for lo, hi in box:
        n *= hi - lo
    return n * torch_dtype(spec.dtype).itemsize


def _op_flops(op, g, obox, reads) -> tuple[float, int | None]:
    """Flops to compute `obox` of op's output; for cache_write and embedding also their true bytes
    (one position; the rows gathered)."""
    out_elems = 1
    for lo, hi in obox:
        out_elems *= hi - lo
    if op.kind == "matmul":
        return 2.0 * out_elems * g.tensors[op.inputs[0]].shape[-1], None
    if op.kind == "decode_attention":
        return 4.0 * out_elems * g.tensors[op.inputs[1]].shape[2], None   # q.k and p.v over the cache
    if op.kind == "cache_write":
        # writes one position per sequence, not the whole cache slice it may touch
        return 0.0, 2 * _nbytes(g, reads[0][0], reads[0][1])
    if op.kind == "embedding":
        # gathers one table row per id: the task's region is the whole table (the ids are data,
        # so dependencies must assume any row), but the bytes moved are the rows gathered
        (ids, ibox), (table, (_, (c0, c1))) = reads[0], reads[1]
        n_ids = _nbytes(g, ids, ibox) // torch_dtype(g.tensors[ids].dtype).itemsize
        row_bytes = (c1 - c0) * torch_dtype(g.tensors[table].dtype).itemsize
        return 0.0, _nbytes(g, ids, ibox) + n_ids * row_bytes + _nbytes(g, op.outputs[0], obox)
    return 5.0 * out_elems, None


def attended_positions(g, op, positions=None) -> float:
    """The cached positions a decode_attention attends per sequence: the kernel reads pos + 1 of them
    (a sliding window its last `window` at most; codegen's n_all), the mean over `positions` (the
    step's pos, one per sequence) or, with none given, over pos drawn uniformly from [0, s_max) as
    the judge draws it (families.family_inputs, zoo's _positions): about half the cache, not all of it."""
    s_max = g.tensors[op.inputs[1]].shape[2]
    w = min(int(op.attrs.get("window", 0)) or s_max, s_max)
    if positions is not None:
        ps = [min(max(int(p), 0), s_max - 1) for p in positions]
        return sum(min(p + 1, w) for p in ps) / max(len(ps), 1)
    return (w * (w + 1) / 2 + (s_max - w) * w) / s_max


def positions_input(g) -> str | None:
    """The graph input that holds a decode step's pos (its first decode_attention's), or None."""
    att = next((o for o in g.ops if o.kind == "decode_attention"), None)
    return att.inputs[3] if att is not None else None


def fed_positions(g, feeds) -> list[int] | None:
    """The pos a step's `feeds` (graph input -> tensor) give its decode attentions, one per sequence:
    what predict(positions=) prices that step at; None where it has no attention."""
    name = positions_input(g)
    return feeds[name].tolist() if name is not None and name in feeds else None


def _cache_share(g, op, positions=None) -> float:
    """The share of its KV caches a decode_attention reads (attended_positions over the cache's
    length; 1.0 for any other op)."""
    if op.kind != "decode_attention":
        return 1.0
    return attended_positions(g, op, positions) / g.tensors[op.inputs[1]].shape[2]


def required_bytes(g) -> int:
    """The bytes any schedule of the graph must move, however it tiles, fuses or orders: every
    matmul weight read once, every attention's KV caches (the positions it attends) read once, the rows an
    embedding gathers, and the graph's outputs written. A plan's task bytes never fall below it
    (tests/test_cost_physics.py): work a fusion repeats raises them, nothing lowers them past it."""
    full: set[str] = set()
    total = 0
    for op in g.ops:
        if op.kind == "matmul":
            full.add(op.inputs[1])
        elif op.kind == "decode_attention":
            share = _cache_share(g, op)
            total += sum(int(_nbytes(g, c, tuple((0, d) for d in g.tensors[c].shape)) * share)
                         for c in op.inputs[1:3])
        elif op.kind == "embedding":
            ids, table = op.inputs[0], op.inputs[1]
            n_ids = 1
            for d in g.tensors[ids].shape:
                n_ids *= d
            total += n_ids * g.tensors[table].shape[-1] * torch_dtype(g.tensors[table].dtype).itemsize
    state = set(g.written_buffers())       # a KV cache is an output, but a step writes one row of it
    for t in full | (set(g.outputs) - state):
        total += _nbytes(g, t, tuple((0, d) for d in g.tensors[t].shape))
    return total
