"""Model zoo: ordinary nn.Modules with seeded random weights, written for capture.

Every model computes one decode step (one new token per sequence) because that is the workload
a megakernel wins on. The composite pieces call the mkgym custom ops (ops.py), so torch.export
sees rmsnorm / rope / cache_write / decode_attention as single nodes.

KV caches are non-persistent buffers [batch, kv_heads, max_seq, head_dim], written in place by
mkgym.cache_write. torch.export records that write as one node on the buffer, and the Graph IR
keeps it as an in-place cache_write, so a step is a function of (ids, pos, weights, caches)
whose effect on the caches is explicit. Non-persistent because caches are state, not weights:
state_dict() stays the weights alone.

Weights are drawn from per-tensor seeded generators, scaled so activations stay O(1):
matmul weights N(0, 1/fan_in), embeddings N(0, 1/hidden) (so a tied lm_head gives unit-scale
logits), norm weights 1 + N(0, 0.05^2) (not exactly 1, so a norm that drops its weight is seen).
The -1b entries are factories: nothing large is built until one is called, and
`device="meta"` builds one with shapes only.

Llama-3.2-1B's shapes are reproduced; its rope frequency scaling ("llama3" rope_type) is not,
since the weights are random anyway.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import torch
from torch import Tensor, nn

from megakernel_gym.compiler import ops  # registers torch.ops.mkgym.*; its rope helpers serve PlainStep

from megakernel_gym.compiler.decode import (  # noqa: F401  (the zoo's names for them)
    _DTYPES, FreshCaches, Step, _positions, fill_caches, step_inputs, step_roofline)


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    max_seq: int
    rope_theta: float = 10000.0
    eps: float = 1e-5
    dtype: str = "float32"          # a key of _DTYPES, kept a string so configs print and serialize
    batch: int = 1                  # sequences decoded together; sizes the KV caches
    tie_embeddings: bool = False    # lm_head reuses the embedding table (Llama-3.2-1B does)

    def __post_init__(self):
        if self.dtype not in _DTYPES:
            raise ValueError(f"LlamaConfig.dtype {self.dtype!r} is not one of {sorted(_DTYPES)}")
        for f in ("vocab", "hidden", "layers", "q_heads", "kv_heads", "head_dim", "ffn",
                  "max_seq", "batch"):
            if getattr(self, f) < 1:
                raise ValueError(f"LlamaConfig.{f} must be >= 1, got {getattr(self, f)}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"LlamaConfig: q_heads {self.q_heads} must be a multiple of kv_heads "
                             f"{self.kv_heads} (grouped-query attention)")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig.head_dim {self.head_dim} must be even for rope")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @classmethod
    def tiny(cls, **overrides) -> "LlamaConfig":
        """Small enough for CPU tests in milliseconds; batch 2 so per-sequence positions differ."""
        return replace(cls(vocab=256, hidden=64, layers=2, q_heads=4, kv_heads=2, head_dim=16,
                           ffn=128, max_seq=32, rope_theta=10000.0, eps=1e-5, dtype="float32",
                           batch=2), **overrides)

    @classmethod
    def llama_1b(cls, **overrides) -> "LlamaConfig":
        """Llama-3.2-1B shapes (bf16, tied embeddings), with a 1024-slot KV cache."""
        return replace(cls(vocab=128256, hidden=2048, layers=16, q_heads=32, kv_heads=8,
                           head_dim=64, ffn=8192, max_seq=1024, rope_theta=500000.0, eps=1e-5,
                           dtype="bfloat16", batch=1, tie_embeddings=True), **overrides)


# ---------------------------------------------------------------------------------------------
# Modules. Each is first built on the meta device and materialized once at the top level, so a
# 1B model is never initialized twice and a meta model costs nothing.

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkgym.rmsnorm(x, self.weight, self.eps)


def _linear(n_in: int, n_out: int, dtype: torch.dtype) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False, dtype=dtype)


class AttentionBlock(nn.Module):
    """x + o_proj(decode_attention(rope(q), cache <- rope(k), cache <- v)) on rmsnorm(x)."""

    def __init__(self, cfg: LlamaConfig, device=None, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        dt = cfg.torch_dtype
        with torch.device("meta"):
            self.norm = RMSNorm(cfg.hidden, cfg.eps, dt)
            self.q_proj = _linear(cfg.hidden, cfg.q_heads * cfg.head_dim, dt)
            self.k_proj = _linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, dt)
            self.v_proj = _linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, dt)
            self.o_proj = _linear(cfg.q_heads * cfg.head_dim, cfg.hidden, dt)
            cache = (cfg.batch, cfg.kv_heads, cfg.max_seq, cfg.head_dim)
            self.register_buffer("k_cache", torch.empty(cache, dtype=dt), persistent=False)
            self.register_buffer("v_cache", torch.empty(cache, dtype=dt), persistent=False)
        _materialize(self, device, seed)

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        cfg = self.cfg
        b = x.shape[0]
        h = self.norm(x)
        q = self.q_proj(h).view(b, cfg.q_heads, cfg.head_dim)
        k = self.k_proj(h).view(b, cfg.kv_heads, cfg.head_dim)
        v = self.v_proj(h).view(b, cfg.kv_heads, cfg.head_dim)
        q = torch.ops.mkgym.rope(q, pos, cfg.rope_theta)
        k = torch.ops.mkgym.rope(k, pos, cfg.rope_theta)
        torch.ops.mkgym.cache_write(self.k_cache, k, pos)
        torch.ops.mkgym.cache_write(self.v_cache, v, pos)
        attn = torch.ops.mkgym.decode_attention(q, self.k_cache, self.v_cache, pos,
                                                1.0 / math.sqrt(cfg.head_dim))
        return x + self.o_proj(attn.reshape(b, cfg.q_heads * cfg.head_dim))


class MLPBlock(nn.Module):
    """x + down_proj(silu(gate_proj(h)) * up_proj(h)) with h = rmsnorm(x)."""

    def __init__(self, cfg: LlamaConfig, device=None, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        dt = cfg.torch_dtype
        with torch.device("meta"):
            self.norm = RMSNorm(cfg.hidden, cfg.eps, dt)
            self.gate_proj = _linear(cfg.hidden, cfg.ffn, dt)
            self.up_proj = _linear(cfg.hidden, cfg.ffn, dt)
            self.down_proj = _linear(cfg.ffn, cfg.hidden, dt)
        _materialize(self, device, seed)

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn = AttentionBlock(cfg, device="meta")
        self.mlp = MLPBlock(cfg, device="meta")

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        return self.mlp(self.attn(x, pos))


class LlamaDecoder(nn.Module):
    """One Llama decode step: forward(token_ids [B], pos [B]) -> logits [B, vocab].

    Writes each layer's k/v for position pos[b] into its caches (in place), then attends over
    slots 0..pos[b]. B must equal cfg.batch (the caches are sized for it).
    """

    def __init__(self, cfg: LlamaConfig, device=None, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        dt = cfg.torch_dtype
        with torch.device("meta"):
            self.embed = nn.Embedding(cfg.vocab, cfg.hidden, dtype=dt)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        with torch.device("meta"):
            self.norm = RMSNorm(cfg.hidden, cfg.eps, dt)
            self.lm_head = _linear(cfg.hidden, cfg.vocab, dt)
        self.tie_weights()
        _materialize(self, device, seed)

    def tie_weights(self) -> None:
        if self.cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def forward(self, token_ids: Tensor, pos: Tensor) -> Tensor:
        if token_ids.shape != (self.cfg.batch,) or pos.shape != (self.cfg.batch,):
            raise ValueError(f"LlamaDecoder: token_ids and pos must both be [{self.cfg.batch}] "
                             f"(cfg.batch), got {tuple(token_ids.shape)} and {tuple(pos.shape)}; "
                             f"build the model with LlamaConfig(batch=...) to change it")
        x = self.embed(token_ids)
        for layer in self.layers:
            x = layer(x, pos)
        return self.lm_head(self.norm(x))


def _materialize(module: nn.Module, device, seed: int) -> None:
    """Allocate a meta-built module on `device` and fill it with seeded random weights."""
    device = torch.device(device if device is not None else "cpu")
    if device.type == "meta":
        return
    module.to_empty(device=device)
    if hasattr(module, "tie_weights"):
        module.tie_weights()    # to_empty gives every module its own tensor, untying weights
    params = dict(module.named_parameters())      # deduplicated: a tied weight is drawn once
    owners = {}
    for mod in module.modules():
        for p in mod.parameters(recurse=False):
            owners.setdefault(id(p), mod)
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(params.items())):
            gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + i)
            owner = owners[id(p)]
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
            if isinstance(owner, RMSNorm):
                p.copy_(1.0 + 0.05 * noise)
            else:   # Linear [out, in] and Embedding [vocab, hidden]: 1/sqrt of the last dim
                p.copy_(noise / math.sqrt(p.shape[1]))
            p.requires_grad_(False)
        for buf in module.buffers():
            buf.zero_()


class DecodeStep(Step):
    """A zoo block or model, or a transformers family, as a judge's reference, named by its block and
    config dict (a level-5 problem's): decode.Step handed step_config's config and make_block's builder."""

    def __init__(self, block: str, config: dict, activations: str | None = "float32"):
        super().__init__(step_config(block, config), partial(make_block, block), activations)


class PlainStep(nn.Module):
    """A zoo model's decode step written as ordinary, fast PyTorch: the strong eager baseline (the
    shape of gpt-fast's decoder) that a megakernel is measured against, beside CUDA-graph replay of
    the zoo model itself (whose reference custom ops are written for clarity, not speed).

    q/k/v and gate/up are one matmul each (weights concatenated once, here), F.rms_norm, rope from
    float32 tables indexed by position, the new k/v rows written by indexing, and
    F.scaled_dot_product_attention over the whole cache with a mask (grouped-query heads through
    enable_gqa). Takes a LlamaDecoder, AttentionBlock or MLPBlock (or one wrapped in DecodeStep /
    FreshCaches), shares its weights, and writes into its own copies of the prefilled caches.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        if isinstance(model, Step):
            model = model.step
        if isinstance(model, FreshCaches):
            model = model.inner
        if not isinstance(model, (LlamaDecoder, AttentionBlock, MLPBlock)):
            raise TypeError(f"PlainStep takes a zoo LlamaDecoder, AttentionBlock or MLPBlock, not {type(model).__name__}")
        self.cfg = cfg = model.cfg
        self.kind = {LlamaDecoder: "llama", AttentionBlock: "attention", MLPBlock: "mlp"}[type(model)]
        blocks = ([m for layer in model.layers for m in (layer.attn, layer.mlp)] if self.kind == "llama"
                  else [model])
        with torch.no_grad():
            self.blocks = [self._attention_weights(b) if isinstance(b, AttentionBlock) else self._mlp_weights(b)
                           for b in blocks]
            if self.kind == "llama":
                self.embed, self.norm, self.lm_head = model.embed.weight, model.norm.weight, model.lm_head.weight
            if self.kind != "mlp":
                device = blocks[0].q_proj.weight.device
                inv = ops.rope_inv_freq(cfg.head_dim, cfg.rope_theta, device)
                angles = torch.arange(cfg.max_seq, device=device, dtype=torch.float32)[:, None] * inv[None, :]
                self.cos, self.sin = angles.cos(), angles.sin()
                self.slots = torch.arange(cfg.max_seq, device=device)

    @staticmethod
    def _attention_weights(b: AttentionBlock) -> dict:
        return {"norm": b.norm.weight, "wqkv": torch.cat([b.q_proj.weight, b.k_proj.weight, b.v_proj.weight]),
                "wo": b.o_proj.weight, "k": b.k_cache.clone(), "v": b.v_cache.clone()}

    @staticmethod
    def _mlp_weights(b: MLPBlock) -> dict:
        return {"norm": b.norm.weight, "wgu": torch.cat([b.gate_proj.weight, b.up_proj.weight]),
                "wd": b.down_proj.weight}

    def _rope(self, x: Tensor, pos: Tensor) -> Tensor:
        return ops.rotate_halves(x, self.cos[pos][:, None, :], self.sin[pos][:, None, :])

    def _attention(self, w: dict, x: Tensor, pos: Tensor) -> Tensor:
        cfg, b = self.cfg, x.shape[0]
        d, hq, hkv = cfg.head_dim, cfg.q_heads, cfg.kv_heads
        h = nn.functional.rms_norm(x, (cfg.hidden,), w["norm"], cfg.eps)
        q, k, v = nn.functional.linear(h, w["wqkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
        q, k = self._rope(q.view(b, hq, d), pos), self._rope(k.view(b, hkv, d), pos)
        rows = torch.arange(b, device=x.device)
        w["k"][rows, :, pos, :] = k
        w["v"][rows, :, pos, :] = v.view(b, hkv, d)
        mask = (self.slots[None, :] <= pos[:, None])[:, None, None, :]           # [B, 1, 1, S]
        o = nn.functional.scaled_dot_product_attention(q[:, :, None, :], w["k"], w["v"], attn_mask=mask,
                                                       scale=1.0 / math.sqrt(d), enable_gqa=True)
        return x + nn.functional.linear(o.reshape(b, hq * d), w["wo"])

    def _mlp(self, w: dict, x: Tensor) -> Tensor:
        h = nn.functional.rms_norm(x, (self.cfg.hidden,), w["norm"], self.cfg.eps)
        gate, up = nn.functional.linear(h, w["wgu"]).chunk(2, dim=-1)
        return x + nn.functional.linear(nn.functional.silu(gate) * up, w["wd"])

    def forward(self, *args: Tensor) -> Tensor:
        if self.kind == "mlp":
            return self._mlp(self.blocks[0], args[0])
        x, pos = args
        if self.kind == "llama":
            x = nn.functional.embedding(x, self.embed)
        for w in self.blocks:
            x = self._attention(w, x, pos) if "wqkv" in w else self._mlp(w, x)
        if self.kind == "attention":
            return x
        return nn.functional.linear(nn.functional.rms_norm(x, (self.cfg.hidden,), self.norm, self.cfg.eps),
                                    self.lm_head)


def block_weights(block: str, cfg: LlamaConfig) -> int:
    """Weight elements one decode step reads (a tied embedding table counts once)."""
    if not isinstance(cfg, LlamaConfig):      # a transformers family: its own parameter count
        from megakernel_gym.compiler.families import family_weights
        return family_weights(cfg)
    attn = cfg.hidden + cfg.hidden * cfg.head_dim * (2 * cfg.q_heads + 2 * cfg.kv_heads)
    mlp = cfg.hidden + 3 * cfg.hidden * cfg.ffn
    if block == "attention":
        return attn
    if block == "mlp":
        return mlp
    return cfg.layers * (attn + mlp) + cfg.vocab * cfg.hidden * (1 if cfg.tie_embeddings else 2) + cfg.hidden


def block_roofline(block: str, cfg: LlamaConfig, mean_context: int) -> tuple[int, int]:
    """(flops, bytes) of one decode step: 2 flops per weight per sequence plus attention over
    `mean_context` cached tokens; bytes are the weights read once plus the KV cache slots read."""
    layers = 0 if block == "mlp" else (1 if block == "attention" else cfg.layers)
    return step_roofline(block_weights(block, cfg), layers, cfg, mean_context)


# ---------------------------------------------------------------------------------------------
# Registry: name -> factory(seed=0, device=None) -> (module, example_inputs).
# Example inputs are drawn on the CPU from `seed` (then moved), so they match across devices.

def _make_llama(cfg: LlamaConfig, seed: int = 0, device=None):
    model = LlamaDecoder(cfg, device=device, seed=seed).eval()
    fill_caches(model, seed + 1)
    ids, pos = step_inputs(cfg, seed)
    return model, (ids.to(device or "cpu"), pos.to(device or "cpu"))


def _make_mlp(cfg: LlamaConfig, seed: int = 0, device=None):
    model = MLPBlock(cfg, device=device, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 2)
    x = torch.randn(cfg.batch, cfg.hidden, generator=gen).to(cfg.torch_dtype)
    return model, (x.to(device or "cpu"),)


def _make_attention(cfg: LlamaConfig, seed: int = 0, device=None):
    model = AttentionBlock(cfg, device=device, seed=seed).eval()
    fill_caches(model, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    x = torch.randn(cfg.batch, cfg.hidden, generator=gen).to(cfg.torch_dtype)
    return model, (x.to(device or "cpu"), _positions(cfg, gen).to(device or "cpu"))


def _family_tiny(family: str, seed: int = 0, device=None):
    from megakernel_gym.compiler.families import FamilyConfig, make_family_step
    return make_family_step(family, FamilyConfig.tiny(family), seed=seed, device=device)


ZOO: dict[str, Callable[..., tuple[nn.Module, tuple]]] = {
    "llama-tiny": partial(_make_llama, LlamaConfig.tiny()),
    "llama-1b": partial(_make_llama, LlamaConfig.llama_1b()),
    "mlp-tiny": partial(_make_mlp, LlamaConfig.tiny()),
    "attention-tiny": partial(_make_attention, LlamaConfig.tiny()),
    "mlp-1b": partial(_make_mlp, LlamaConfig.llama_1b()),
    "attention-1b": partial(_make_attention, LlamaConfig.llama_1b()),
    # transformers' own models through compiler.families (tiny: 2 layers, hidden 64, fp32)
    **{f"{fam}-tiny": partial(_family_tiny, fam) for fam in ("hf-llama", "qwen2", "qwen3", "mistral", "gpt2", "mixtral")},
}


_MAKERS = {"llama": _make_llama, "attention": _make_attention, "mlp": _make_mlp}


def step_config(block: str, config: dict):
    """A level-5 problem's (block, config dict) as its config: LlamaConfig for the zoo's own blocks,
    families.FamilyConfig for a transformers family (block is the family's name, e.g. 'qwen3')."""
    from megakernel_gym.compiler.families import FAMILIES, family_config
    if block in FAMILIES:
        return family_config(block, config)
    if block not in _MAKERS:
        raise ValueError(f"unknown block {block!r}; one of {sorted(_MAKERS) + sorted(FAMILIES)}")
    return LlamaConfig(**config)


def make_block(block: str, cfg, seed: int = 0, device=None):
    """(module, example_inputs) for a block kind of DecodeStep ('llama', 'attention', 'mlp', or a
    transformers family of compiler.families) at any config: what a level-5 problem's config compiles to."""
    from megakernel_gym.compiler.families import FAMILIES, make_family_step
    if block in FAMILIES:
        return make_family_step(block, cfg, seed=seed, device=device)
    if block not in _MAKERS:
        raise ValueError(f"unknown block {block!r}; one of {sorted(_MAKERS) + sorted(FAMILIES)}")
    return _MAKERS[block](cfg, seed=seed, device=device)
