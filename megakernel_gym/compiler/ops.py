"""Custom operators (namespace `mkgym`) for the composite primitives that aten would shatter.

Written in plain aten, an RMSNorm is five nodes, a rotary embedding a dozen and a cached
attention step a few dozen; capture would have to pattern-match them back together. Models in
the zoo call these ops instead, so torch.export keeps each one as a single node and the Graph
IR gets the primitive directly. Each op has one reference implementation in plain PyTorch (its
kernel on every device, and the semantics the interpreter and every later stage must match)
and a fake implementation so torch.export can trace it without data.

Precision: norms, rotary angles and attention softmax run in float32 and cast back to the
input dtype, as a fused GPU kernel would.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rmsnorm", "rope", "decode_attention", "cache_write", "moe_route", "moe_route_ref",
           "rmsnorm_ref", "rope_ref", "decode_attention_ref", "window_start", "cache_write_ref", "rope_inv_freq", "rotate_halves",
           "split_bounds", "decode_attention_part_ref", "combine_attention_parts"]


# ---------------------------------------------------------------------------------------------
# Shape checks, shared by the reference and fake implementations so export fails early with
# the same message eager execution would give.

def _check_rmsnorm(x: Tensor, w: Tensor) -> None:
    if w.dim() != 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"mkgym.rmsnorm: weight shape {tuple(w.shape)} does not match the last "
                         f"dim of x {tuple(x.shape)}; pass a 1-D weight of size x.shape[-1]")


def _check_rope(x: Tensor, pos: Tensor) -> None:
    if x.dim() != 3 or pos.dim() != 1 or pos.shape[0] != x.shape[0]:
        raise ValueError(f"mkgym.rope: expected x [B, H, D] and pos [B], got x {tuple(x.shape)} "
                         f"and pos {tuple(pos.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"mkgym.rope: head dim {x.shape[-1]} must be even (half-rotation layout)")
    if pos.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"mkgym.rope: pos must be an integer tensor, got {pos.dtype}")


def _check_attention(q: Tensor, k: Tensor, v: Tensor, pos: Tensor) -> None:
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"mkgym.decode_attention: expected q [B, Hq, D] and k/v caches "
                         f"[B, Hkv, S, D] of equal shape, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    b, hq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or pos.shape != (b,):
        raise ValueError(f"mkgym.decode_attention: batch/head-dim mismatch: q {tuple(q.shape)}, "
                         f"caches {tuple(k.shape)}, pos {tuple(pos.shape)}")
    if hq % k.shape[1]:
        raise ValueError(f"mkgym.decode_attention: {hq} query heads is not a multiple of "
                         f"{k.shape[1]} kv heads")


def _check_cache_write(cache: Tensor, new: Tensor, pos: Tensor) -> None:
    b, h, _, d = cache.shape
    if new.shape != (b, h, d) or pos.shape != (b,):
        raise ValueError(f"mkgym.cache_write: expected new [B, H, D] = {(b, h, d)} and pos [{b}] "
                         f"for a cache {tuple(cache.shape)}, got new {tuple(new.shape)} and "
                         f"pos {tuple(pos.shape)}")


def _check_positions(pos: Tensor, seq: int, op: str) -> None:
    # Only on the CPU: on a GPU the check would cost a device sync per call and make the eager
    # model a misleadingly slow baseline; there an out-of-range write fails in the index kernel.
    if pos.device.type == "cpu" and pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= seq):
        raise ValueError(f"{op}: positions {pos.tolist()} fall outside the cache of {seq} slots; "
                         f"keep 0 <= pos < max_seq")


# ---------------------------------------------------------------------------------------------
# Reference implementations (plain PyTorch). The interpreter calls these directly.

def rmsnorm_ref(x: Tensor, w: Tensor | None, eps: float) -> Tensor:
    """y = x * rsqrt(mean(x^2, -1) + eps) * w, in float32, cast back to x.dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.float()
    return y.to(x.dtype)


def rope_inv_freq(d: int, theta: float, device=None) -> Tensor:
    """theta^(-2i/D) for i < D/2, in float32: the rotation rate of dim pair (i, i + D/2)."""
    return 1.0 / (theta ** (torch.arange(0, d // 2, device=device, dtype=torch.float32) * 2.0 / d))


def rotate_halves(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x rotated in float32 in Llama's half layout (dim i with dim i + D/2) by angles whose cos and
    sin broadcast against x[..., :D/2]; cast back to x.dtype."""
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rope_ref(x: Tensor, pos: Tensor, theta: float) -> Tensor:
    """Rotary embedding in Llama's half-rotation layout: dim i pairs with dim i + D/2.

    x [B, H, D], pos [B]: every head of sequence b is rotated by angle pos[b] * theta^(-2i/D).
    """
    angles = pos.to(torch.float32)[:, None] * rope_inv_freq(x.shape[-1], theta, x.device)[None, :]  # [B, D/2]
    return rotate_halves(x, angles.cos()[:, None, :], angles.sin()[:, None, :])                      # [B, 1, D/2]


def window_start(pos: int, window: int) -> int:
    """The first cache slot a query at `pos` attends: 0, or with a sliding window of `window` slots
    (the query's own included, as transformers' Mistral masks) pos - window + 1."""
    return max(0, pos - window + 1) if window > 0 else 0


def decode_attention_ref(q: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor,
                         scale: float, window: int = 0) -> Tensor:
    """One query token per sequence attends over cache slots 0..pos[b] inclusive (with a sliding
    window > 0, over the last `window` of them: window_start(pos[b], window)..pos[b]).

    q [B, Hq, D]; caches [B, Hkv, S, D]; query head h reads kv head h // (Hq / Hkv).
    Scores, softmax and the weighted sum run in float32; the result is cast to q.dtype.
    """
    b, hq, d = q.shape
    hkv, s = k_cache.shape[1], k_cache.shape[2]
    group = hq // hkv
    qf = q.float().reshape(b, hkv, group, d)
    scores = torch.einsum("bkgd,bksd->bkgs", qf, k_cache.float()) * scale
    slots, p = torch.arange(s, device=q.device)[None, :], pos.to(q.device)[:, None]
    hidden = slots > p                                                                # [B, S]
    if window > 0:
        hidden = hidden | (slots < p - (window - 1))
    scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bkgs,bksd->bkgd", probs, v_cache.float())
    return out.reshape(b, hq, d).to(q.dtype)


def split_bounds(n: int, part: int, parts: int) -> tuple[int, int]:
    """The positions [s0, s1) that part `part` of `parts` covers of a sequence's n cached ones: equal
    slices of ceil(n / parts), the last ones short or empty (the megakernel splits the same way)."""
    chunk = -(-n // parts)
    return min(n, part * chunk), min(n, (part + 1) * chunk)


def decode_attention_part_ref(q: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor, scale: float,
                              part: int, parts: int, window: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """One part of split-KV decode attention: over this part's slice of each sequence's attended
    positions window_start(pos[b])..pos[b] (split_bounds over their count, from the first), the
    unnormalized float32 sum of exp(score - m) * v, the running max m
    and the sum l of exp(score - m), per query head. An empty slice gives m = -inf, l = 0, o = 0.
    Returns (o [B, Hq, D], m [B, Hq], l [B, Hq])."""
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    group = hq // hkv
    o = torch.zeros(b, hq, d, dtype=torch.float32, device=q.device)
    m = torch.full((b, hq), float("-inf"), dtype=torch.float32, device=q.device)
    lsum = torch.zeros(b, hq, dtype=torch.float32, device=q.device)
    for bb in range(b):
        first = window_start(int(pos[bb]), window)
        s0, s1 = split_bounds(min(int(pos[bb]) + 1, k_cache.shape[2]) - first, part, parts)
        s0, s1 = s0 + first, s1 + first
        if s0 >= s1:
            continue
        qf = q[bb].float().reshape(hkv, group, d)
        scores = torch.einsum("kgd,ksd->kgs", qf, k_cache[bb, :, s0:s1].float()) * scale
        mx = scores.amax(-1)
        p = torch.exp(scores - mx[..., None])
        o[bb] = torch.einsum("kgs,ksd->kgd", p, v_cache[bb, :, s0:s1].float()).reshape(hq, d)
        m[bb], lsum[bb] = mx.reshape(hq), p.sum(-1).reshape(hq)
    return o, m, lsum


def combine_attention_parts(partials: list[tuple[Tensor, Tensor, Tensor]], dtype: torch.dtype) -> Tensor:
    """The attention output from its split parts' (o, m, l): rescale each to the common max, sum,
    and divide by the total softmax denominator; cast to `dtype`."""
    ms = torch.stack([m for _, m, _ in partials])                    # [P, B, H]
    top = ms.amax(0)
    w = torch.where(ms == float("-inf"), torch.zeros_like(ms), torch.exp(ms - top))
    lsum = sum(wp * lp for wp, (_, _, lp) in zip(w, partials))
    o = sum(wp[..., None] * op for wp, (op, _, _) in zip(w, partials))
    return (o / lsum[..., None]).to(dtype)


def moe_route_ref(logits: Tensor, top_k: int, expert: int) -> Tensor:
    """Mixtral's router weight of one expert: the softmax of each row's logits (float32), its top_k
    entries renormalized to sum to 1; [B, 1], the expert's weight where it is among the top_k of
    row b, else 0. A dense MoE layer is sum over experts of moe_route(logits, k, e) * expert_e(x)."""
    probs = torch.softmax(logits.float(), dim=-1)
    top, idx = torch.topk(probs, top_k, dim=-1)
    top = top / top.sum(dim=-1, keepdim=True)
    return (top * (idx == expert)).sum(dim=-1, keepdim=True)


def _check_moe_route(logits: Tensor, top_k: int, expert: int) -> None:
    if logits.dim() != 2 or not 1 <= top_k <= logits.shape[1] or not 0 <= expert < logits.shape[1]:
        raise ValueError(f"mkgym.moe_route: expected logits [B, E] with 1 <= top_k <= E and 0 <= expert < E, got "
                         f"logits {tuple(logits.shape)}, top_k {top_k}, expert {expert}")


def cache_write_ref(cache: Tensor, new: Tensor, pos: Tensor) -> None:
    """cache[b, :, pos[b], :] = new[b] for every sequence b, in place."""
    rows = torch.arange(cache.shape[0], device=cache.device)
    cache[rows, :, pos.to(cache.device), :] = new.to(cache.dtype)


# ---------------------------------------------------------------------------------------------
# Registration. torch.library.custom_op makes each function an opaque operator that
# torch.export records as one node (torch.ops.mkgym.<name>.default).

@torch.library.custom_op("mkgym::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    _check_rmsnorm(x, w)
    return rmsnorm_ref(x, w, eps)


@rmsnorm.register_fake
def _(x, w, eps):
    _check_rmsnorm(x, w)
    return torch.empty_like(x)


@torch.library.custom_op("mkgym::rope", mutates_args=())
def rope(x: Tensor, pos: Tensor, theta: float) -> Tensor:
    _check_rope(x, pos)
    return rope_ref(x, pos, theta)


@rope.register_fake
def _(x, pos, theta):
    _check_rope(x, pos)
    return torch.empty_like(x)


@torch.library.custom_op("mkgym::decode_attention", mutates_args=())
def decode_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor,
                     scale: float, window: int = 0) -> Tensor:
    _check_attention(q, k_cache, v_cache, pos)
    _check_positions(pos, k_cache.shape[2], "mkgym.decode_attention")
    if window < 0:
        raise ValueError(f"mkgym.decode_attention: window {window} must be >= 0 (0: no sliding window)")
    return decode_attention_ref(q, k_cache, v_cache, pos, scale, window)


@decode_attention.register_fake
def _(q, k_cache, v_cache, pos, scale, window=0):
    _check_attention(q, k_cache, v_cache, pos)
    return torch.empty_like(q)


@torch.library.custom_op("mkgym::moe_route", mutates_args=())
def moe_route(logits: Tensor, top_k: int, expert: int) -> Tensor:
    _check_moe_route(logits, top_k, expert)
    return moe_route_ref(logits, top_k, expert)


@moe_route.register_fake
def _(logits, top_k, expert):
    _check_moe_route(logits, top_k, expert)
    return logits.new_empty((logits.shape[0], 1), dtype=torch.float32)


# In place, declared through mutates_args: torch.export (non-strict, training IR) then keeps the
# call as one node followed by reads of the same buffer, which is exactly the Graph IR's
# cache_write (the cache is a named buffer written where it lives). A functional version would
# copy the whole cache every step in eager mode.
@torch.library.custom_op("mkgym::cache_write", mutates_args=("cache",))
def cache_write(cache: Tensor, new: Tensor, pos: Tensor) -> None:
    _check_cache_write(cache, new, pos)
    _check_positions(pos, cache.shape[2], "mkgym.cache_write")
    cache_write_ref(cache, new, pos)


@cache_write.register_fake
def _(cache, new, pos):
    _check_cache_write(cache, new, pos)
