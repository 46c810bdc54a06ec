"""Model families from Hugging Face transformers, captured through adapters.

A family is a transformers causal-LM architecture (`model_type`) the compiler takes as it is:
the model is built by transformers itself (`AutoModelForCausalLM.from_config`), keeps its own
modules, parameter names ("model.layers.0.self_attn.q_proj.weight") and MLP forward, and is
captured through torch.export like any zoo model. What a transformers decode step has that the
compiler has no primitive for (its rotary tables, SDPA with masks, a Python-object KV cache) is
swapped out on the model instance: the adapter replaces the forward of the model, its decoder
layers, attention modules and norms with ones on the mkgym primitives (ops.py) that read the
same weights, and gives each attention module a static KV cache buffer. Every other module keeps
transformers' forward, so a family's MLP is transformers' own code.

    model, inputs = make_family_step("qwen3", FamilyConfig.tiny("qwen3"), seed=0)
    logits = model(*inputs)                     # forward(token_ids [B], pos [B]) -> [B, vocab]
    native = transformers_logits(model, *inputs)   # the same step through transformers' own forward

`transformers_logits` is the check that the adapter is the family: it runs the unpatched model
with a transformers DynamicCache prefilled from the adapter's caches, one sequence at a time.

transformers is imported only when a family model is built or its weights counted, so loading a
problem file stays fast.
A configuration the adapter cannot honour (a scaled rotary embedding, an activation the compiler
has no mapping for) is refused with UnsupportedModelError naming the setting and the fix.
"""
from __future__ import annotations

import functools
import json
import math
import types
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from megakernel_gym.compiler import ops  # noqa: F401  (registers torch.ops.mkgym.*)
from megakernel_gym.compiler.decode import Step, fill_caches, step_inputs, step_roofline

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UnsupportedModelError(ValueError):
    """A transformers model or configuration the adapters cannot take; the message names why."""


@dataclass(frozen=True)
class Family:
    model_type: str          # transformers' model_type (AutoConfig.for_model)
    attention: str           # which adapter: "llama" (q/k/v/o projections, rotary) or "gpt2"
    qk_norm: bool = False    # per-head RMSNorm of q and k before the rotation (Qwen3)
    window: bool = False     # sliding-window attention (Mistral)
    moe: bool = False        # a sparse mixture of experts in place of the MLP (Mixtral)
    note: str = ""


FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", "gpt2", note="GPT2LMHeadModel: LayerNorm, GELU, learned positions, fused q/k/v Conv1D"),
    "hf-llama": Family("llama", "llama", note="LlamaForCausalLM"),
    "qwen2": Family("qwen2", "llama", note="Qwen2ForCausalLM: q/k/v projections with biases"),
    "qwen3": Family("qwen3", "llama", qk_norm=True, note="Qwen3ForCausalLM: per-head q/k RMSNorm"),
    "mistral": Family("mistral", "llama", window=True, note="MistralForCausalLM: sliding-window attention"),
    "mixtral": Family("mixtral", "llama", moe=True, note="MixtralForCausalLM: top-k routed mixture of SwiGLU experts"),
}


@dataclass(frozen=True)
class FamilyConfig:
    """A family model's shapes in the zoo's words, plus anything else for its transformers config.

    `extra` holds transformers config fields as they are named there (e.g. {"sliding_window": 512}).
    """
    family: str
    vocab: int
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    max_seq: int
    rope_theta: float = 10000.0
    eps: float = 1e-6
    dtype: str = "float32"
    batch: int = 1
    tie_embeddings: bool = False
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"FamilyConfig.family {self.family!r} is not one of {sorted(FAMILIES)}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"FamilyConfig.dtype {self.dtype!r} is not one of {sorted(_DTYPES)}")
        for f in ("vocab", "hidden", "layers", "q_heads", "kv_heads", "head_dim", "ffn", "max_seq", "batch"):
            if not isinstance(getattr(self, f), int) or getattr(self, f) < 1:
                raise ValueError(f"FamilyConfig.{f} must be an int >= 1, got {getattr(self, f)!r}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"FamilyConfig: q_heads {self.q_heads} must be a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"FamilyConfig.head_dim {self.head_dim} must be even for the rotary embedding")
        if FAMILIES[self.family].attention == "gpt2" and (self.kv_heads != self.q_heads
                                                           or self.head_dim * self.q_heads != self.hidden):
            raise ValueError(f"FamilyConfig for {self.family}: kv_heads must equal q_heads and head_dim * q_heads "
                             f"the hidden size (GPT-2 has neither grouped queries nor a separate head size)")
        if not isinstance(self.extra, dict):
            raise ValueError(f"FamilyConfig.extra must be a dict of transformers config fields, got {self.extra!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @classmethod
    def tiny(cls, family: str, **overrides) -> "FamilyConfig":
        """Small enough for CPU tests; batch 2 so the two sequences sit at different positions."""
        fam = FAMILIES.get(family, Family("", ""))
        extra = {"sliding_window": 8} if fam.window else {}
        if fam.moe:
            extra = {"num_local_experts": 4, "num_experts_per_tok": 2}
        gpt2 = fam.attention == "gpt2"    # no grouped queries; embeddings tied, as GPT-2's always are
        return replace(cls(family=family, vocab=256, hidden=64, layers=2, q_heads=4, kv_heads=4 if gpt2 else 2,
                           head_dim=16, ffn=64 if fam.moe else 128, max_seq=32, batch=2, tie_embeddings=gpt2,
                           extra=extra), **overrides)

    def hf_config(self):
        """The transformers config these shapes describe (attention through eager, no dropout)."""
        from transformers import AutoConfig
        fam = FAMILIES[self.family]
        if fam.attention == "gpt2":
            kw = dict(vocab_size=self.vocab, n_embd=self.hidden, n_layer=self.layers, n_head=self.q_heads,
                      n_inner=self.ffn, n_positions=self.max_seq, layer_norm_epsilon=self.eps,
                      activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=self.vocab - 1, eos_token_id=self.vocab - 1)
        else:
            kw = dict(vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
                      num_attention_heads=self.q_heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                      intermediate_size=self.ffn, max_position_embeddings=self.max_seq, rms_norm_eps=self.eps,
                      rope_theta=self.rope_theta, hidden_act="silu", attention_dropout=0.0)
        kw.update(tie_word_embeddings=self.tie_embeddings, **self.extra)
        cfg = AutoConfig.for_model(fam.model_type, **kw)
        cfg._attn_implementation = "eager"
        return cfg


def config_from_dict(config: dict) -> FamilyConfig:
    """A problem file's `config` dict -> FamilyConfig, with a message naming a bad key."""
    if not isinstance(config, dict):
        raise ValueError(f"a family model's config must be a dict, got {type(config).__name__}")
    try:
        return FamilyConfig(**config)
    except TypeError as e:
        known = sorted(FamilyConfig.__dataclass_fields__)
        raise ValueError(f"bad family config {sorted(config)}: {e}; the fields are {known}") from None


# ---------------------------------------------------------------------------------------------
# Adapted forwards. Each is bound to one module instance (types.MethodType), so transformers'
# classes are untouched and `native(model)` can lift the patch off again.

def _norm_forward(self, x: Tensor) -> Tensor:
    return torch.ops.mkgym.rmsnorm(x, self.weight, self.variance_epsilon)


def _attention_forward(self, h: Tensor, pos: Tensor) -> Tensor:
    spec = self._mkgym
    b, hq, hkv, d = h.shape[0], spec["q_heads"], spec["kv_heads"], spec["head_dim"]
    q = self.q_proj(h)
    k = self.k_proj(h)
    v = self.v_proj(h).view(b, hkv, d)
    if spec["qk_norm"]:      # one RMSNorm row per head: [B*H, D] rows, as the megakernel tiles them
        q = self.q_norm(q.view(b * hq, d))
        k = self.k_norm(k.view(b * hkv, d))
    q, k = q.view(b, hq, d), k.view(b, hkv, d)
    if spec["theta"] is not None:     # rotary positions (GPT-2's are learned, added to the embedding)
        q = torch.ops.mkgym.rope(q, pos, spec["theta"])
        k = torch.ops.mkgym.rope(k, pos, spec["theta"])
    torch.ops.mkgym.cache_write(self.k_cache, k, pos)
    torch.ops.mkgym.cache_write(self.v_cache, v, pos)
    attn = torch.ops.mkgym.decode_attention(q, self.k_cache, self.v_cache, pos, spec["scale"], spec["window"])
    return self.o_proj(attn.reshape(b, hq * d))


def _moe_forward(self, h: Tensor) -> Tensor:
    """Every expert on every row, weighted by its router weight (0 where it is not among the row's
    top_k): transformers' sum over the chosen experts, in its order, with zeros between."""
    spec = self._mkgym
    logits = nn.functional.linear(h, self.gate.weight.to(h.dtype))   # widened in a float32 reference
    out = None
    for e in range(spec["experts"]):
        y = self.expert_down[e](self.experts.act_fn(self.expert_gate[e](h)) * self.expert_up[e](h))
        # weighted in float32 (the router's dtype), then in the hidden dtype, as transformers' index_add_
        y = (y * torch.ops.mkgym.moe_route(logits, spec["top_k"], e)).to(h.dtype)
        out = y if out is None else out + y
    return out


def _linear_rows(w: Tensor, b: Tensor | None = None) -> nn.Linear:
    """An nn.Linear holding copies of the [out, in] matrix w (and bias b): a weight laid out once at
    adapt time, as inference engines do at load (one expert of a 3-D expert tensor; a slice of
    GPT-2's Conv1D, transposed). The tensors it was cut from are dropped after: native() rebuilds them."""
    lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None, dtype=w.dtype, device=w.device)
    with torch.no_grad():
        if w.device.type != "meta":
            lin.weight.copy_(w)
            if b is not None:
                lin.bias.copy_(b)
    lin.requires_grad_(False)
    return lin


def _adapt_moe(block: nn.Module, cfg: FamilyConfig) -> None:
    experts = block.experts
    if not hasattr(experts, "gate_up_proj"):
        raise UnsupportedModelError(f"{cfg.family}: experts as {type(experts).__name__} without 3-D gate_up_proj / "
                                    "down_proj tensors (transformers >= 5's layout) are not supported")
    n, f = experts.gate_up_proj.shape[0], experts.gate_up_proj.shape[1] // 2
    block.expert_gate = nn.ModuleList(_linear_rows(experts.gate_up_proj[e, :f]) for e in range(n))
    block.expert_up = nn.ModuleList(_linear_rows(experts.gate_up_proj[e, f:]) for e in range(n))
    block.expert_down = nn.ModuleList(_linear_rows(experts.down_proj[e]) for e in range(n))
    top_k = getattr(block, "top_k", None) or getattr(block.gate, "top_k")
    block._mkgym = {"experts": n, "top_k": int(top_k)}
    _moe_layout(block, attach=False)          # one copy of each weight: native() stacks them again
    block._mkgym_layout = "moe"
    _patch(block, _moe_forward)


def _layer_forward(self, x: Tensor, pos: Tensor) -> Tensor:
    x = x + self.self_attn(self.input_layernorm(x), pos)
    return x + self.mlp(self.post_attention_layernorm(x))


def _check_step_inputs(model: nn.Module, token_ids: Tensor, pos: Tensor) -> None:
    batch = model._mkgym["batch"]
    if token_ids.shape != (batch,) or pos.shape != (batch,):
        raise ValueError(f"{type(model).__name__} decode step: token_ids and pos must both be [{batch}] (the "
                         f"config's batch), got {tuple(token_ids.shape)} and {tuple(pos.shape)}")


def _model_forward(self, token_ids: Tensor, pos: Tensor) -> Tensor:
    _check_step_inputs(self, token_ids, pos)
    inner = self.model
    x = inner.embed_tokens(token_ids)
    for layer in inner.layers:
        x = layer(x, pos)
    return self.lm_head(inner.norm(x))


def _gpt2_mlp_forward(self, h: Tensor) -> Tensor:
    return self.proj(self.act(self.fc(h)))


def _gpt2_block_forward(self, x: Tensor, pos: Tensor) -> Tensor:
    x = x + self.attn(self.ln_1(x), pos)
    return x + self.mlp(self.ln_2(x))


def _gpt2_model_forward(self, token_ids: Tensor, pos: Tensor) -> Tensor:
    _check_step_inputs(self, token_ids, pos)
    t = self.transformer
    x = t.wte(token_ids) + t.wpe(pos)
    for block in t.h:
        x = block(x, pos)
    return self.lm_head(t.ln_f(x))


def _linear_from_conv1d(conv: nn.Module, cols: slice = slice(None)) -> nn.Linear:
    """transformers' Conv1D (x @ W + b, W [in, out]), or a slice of its output columns, as an nn.Linear."""
    return _linear_rows(conv.weight[:, cols].t(), conv.bias[cols])


def _adapt_gpt2(model: nn.Module, cfg: FamilyConfig) -> nn.Module:
    hf = model.config
    act = getattr(hf, "activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise UnsupportedModelError(f"gpt2: activation_function {act!r}; use 'gelu_new' (GPT-2's)")
    _patch(model, _gpt2_model_forward)
    model._mkgym = {"batch": cfg.batch}
    h = cfg.hidden
    for block in model.transformer.h:
        attn, mlp = block.attn, block.mlp
        attn.q_proj = _linear_from_conv1d(attn.c_attn, slice(0, h))
        attn.k_proj = _linear_from_conv1d(attn.c_attn, slice(h, 2 * h))
        attn.v_proj = _linear_from_conv1d(attn.c_attn, slice(2 * h, 3 * h))
        attn.o_proj = _linear_from_conv1d(attn.c_proj)
        mlp.fc = _linear_from_conv1d(mlp.c_fc)
        mlp.proj = _linear_from_conv1d(mlp.c_proj)
        _gpt2_layout(block, attach=False)     # one copy of each weight: native() lays them out again
        block._mkgym_layout = "gpt2"
        scale = getattr(attn, "scaling", None)
        if scale is None:
            scale = cfg.head_dim ** -0.5 if getattr(attn, "scale_attn_weights", True) else 1.0
        _adapt_attention(attn, cfg, theta=None, scale=float(scale), qk_norm=False, window=0)
        _patch(mlp, _gpt2_mlp_forward)
        _patch(block, _gpt2_block_forward)
    return model


def _adapt_attention(attn: nn.Module, cfg: FamilyConfig, theta: float | None, scale: float, qk_norm: bool,
                     window: int) -> None:
    """An attention module (with q/k/v/o_proj) onto _attention_forward, with its static KV caches
    [B, kv_heads, max_seq, head_dim] as non-persistent buffers. theta None: no rotary positions."""
    kv = cfg.q_heads if FAMILIES[cfg.family].attention == "gpt2" else cfg.kv_heads
    attn._mkgym = {"q_heads": cfg.q_heads, "kv_heads": kv, "head_dim": cfg.head_dim, "theta": theta,
                   "scale": scale, "qk_norm": qk_norm, "window": window}
    shape = (cfg.batch, kv, cfg.max_seq, cfg.head_dim)
    device = attn.q_proj.weight.device
    attn.register_buffer("k_cache", torch.zeros(shape, dtype=cfg.torch_dtype, device=device), persistent=False)
    attn.register_buffer("v_cache", torch.zeros(shape, dtype=cfg.torch_dtype, device=device), persistent=False)
    _patch(attn, _attention_forward)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention module of every decoder layer, in order (where the adapter keeps the caches)."""
    if hasattr(model, "transformer"):
        return [block.attn for block in model.transformer.h]
    return [layer.self_attn for layer in model.model.layers]


def _patch(module: nn.Module, fn) -> None:
    module.forward = types.MethodType(fn, module)
    module._mkgym_patched = True


def adapt(model: nn.Module, cfg: FamilyConfig) -> nn.Module:
    """Turn a transformers causal LM of `cfg.family` into a decode step on the mkgym primitives,
    in place: forward(token_ids [B], pos [B]) -> logits [B, vocab], KV caches as buffers
    (`model.layers.N.self_attn.k_cache`, [B, kv_heads, max_seq, head_dim], non-persistent)."""
    fam = FAMILIES[cfg.family]
    if fam.attention == "gpt2":
        return _adapt_gpt2(model, cfg)
    hf = model.config
    rope = getattr(hf, "rope_parameters", None) or {"rope_type": getattr(hf, "rope_scaling", None) and
                                                    hf.rope_scaling.get("rope_type", "default") or "default"}
    if rope.get("rope_type", "default") != "default":
        raise UnsupportedModelError(f"{cfg.family}: rope_type {rope['rope_type']!r} (scaled rotary frequencies) is not "
                                    "supported by mkgym.rope; use rope_type 'default' (random weights need no scaling)")
    act = getattr(hf, "hidden_act", "silu")
    if act != "silu":
        raise UnsupportedModelError(f"{cfg.family}: hidden_act {act!r}; the adapter's MLP families use 'silu'")
    # a sliding window applies where the config sets one, unless a use_sliding_window flag (Qwen's)
    # says otherwise; Qwen's per-layer windows (use_sliding_window=True) are not supported
    use = getattr(hf, "use_sliding_window", None)
    if use:
        raise UnsupportedModelError(f"{cfg.family}: use_sliding_window=True (windows on some layers only); set it "
                                    "False (full attention)")
    window = int(hf.sliding_window) if getattr(hf, "sliding_window", None) and use is None else 0
    inner = model.model
    _patch(model, _model_forward)
    model._mkgym = {"batch": cfg.batch}
    for layer in inner.layers:
        attn = layer.self_attn
        if attn.head_dim != cfg.head_dim:
            raise UnsupportedModelError(f"{cfg.family}: attention head_dim {attn.head_dim} != config {cfg.head_dim}")
        _adapt_attention(attn, cfg, theta=float(rope.get("rope_theta", cfg.rope_theta)), scale=float(attn.scaling),
                         qk_norm=fam.qk_norm, window=window)
        _patch(layer, _layer_forward)
        if fam.moe:
            _adapt_moe(layer.mlp, cfg)
        norms = [layer.input_layernorm, layer.post_attention_layernorm]
        if fam.qk_norm:
            norms += [attn.q_norm, attn.k_norm]
        for norm in norms:
            _patch(norm, _norm_forward)
    _patch(inner.norm, _norm_forward)
    return model


@contextmanager
def native(model: nn.Module):
    """transformers' own forwards while inside: the adapter's instance patches lifted, and weights the
    adapter re-laid out (GPT-2's Conv1D, Mixtral's 3-D experts) put back in transformers' layout from
    the adapted ones (so they agree whatever was loaded into the model); all undone on the way out."""
    lifted, relaid = [], []
    for mod in model.modules():
        if getattr(mod, "_mkgym_patched", False) and "forward" in mod.__dict__:
            lifted.append((mod, mod.__dict__.pop("forward")))
        if getattr(mod, "_mkgym_layout", None):
            relaid.append(mod)
    try:
        for mod in relaid:
            _LAYOUTS[mod._mkgym_layout](mod, True)
        yield model
    finally:
        for mod in relaid:
            _LAYOUTS[mod._mkgym_layout](mod, False)
        for mod, fwd in lifted:
            mod.forward = fwd


def _param(t: Tensor) -> nn.Parameter:
    return nn.Parameter(t.contiguous(), requires_grad=False)


def _gpt2_layout(block: nn.Module, attach: bool) -> None:
    """A GPT-2 block's Conv1D weights ([in, out]; q/k/v fused) from the adapter's [out, in] rows, or gone."""
    attn, mlp = block.attn, block.mlp
    convs = {attn.c_attn: (attn.q_proj, attn.k_proj, attn.v_proj), attn.c_proj: (attn.o_proj,),
             mlp.c_fc: (mlp.fc,), mlp.c_proj: (mlp.proj,)}
    for conv, lins in convs.items():
        if attach:
            conv.weight = _param(torch.cat([lin.weight for lin in lins]).t())
            conv.bias = _param(torch.cat([lin.bias for lin in lins]))
        else:
            del conv.weight, conv.bias


def _moe_layout(block: nn.Module, attach: bool) -> None:
    """A Mixtral block's 3-D expert tensors from the adapter's weight per expert, or gone."""
    experts, n = block.experts, block._mkgym["experts"]
    if attach:
        experts.gate_up_proj = _param(torch.stack([torch.cat([block.expert_gate[e].weight, block.expert_up[e].weight])
                                                   for e in range(n)]))
        experts.down_proj = _param(torch.stack([block.expert_down[e].weight for e in range(n)]))
    else:
        del experts.gate_up_proj, experts.down_proj


_LAYOUTS = {"gpt2": _gpt2_layout, "moe": _moe_layout}


# ---------------------------------------------------------------------------------------------
# Building one

def _init_weights(model: nn.Module, seed: int) -> None:
    """Per-tensor seeded draws, as the zoo's: the same weights on any device. Norm weights
    1 + N(0, 0.05^2); biases N(0, 0.1^2) (big enough that a dropped bias is seen); matrices
    N(0, 1/fan_in) with fan_in the last dim (a Linear's [out, in], an embedding's [vocab, hidden]; a
    Conv1D's first)."""
    device = next(model.parameters()).device
    norms = {id(m.weight) for m in model.modules() if "Norm" in type(m).__name__ and getattr(m, "weight", None) is not None}
    # transformers' Conv1D (GPT-2) stores [in, out]: its fan-in is the first dim
    conv_in = {id(m.weight) for m in model.modules() if type(m).__name__ == "Conv1D"}
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(dict(model.named_parameters()).items())):
            gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + i)
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
            if id(p) in norms:
                p.copy_(1.0 + 0.05 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[0] if id(p) in conv_in else p.shape[-1]))
            p.requires_grad_(False)


def build_family_model(cfg: FamilyConfig, seed: int = 0, device=None) -> nn.Module:
    """The transformers model for `cfg`, seeded random weights, adapted (see `adapt`); on
    `device="meta"` shapes only."""
    from transformers import AutoModelForCausalLM
    device = torch.device(device if device is not None else "cpu")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg.hf_config(), dtype=cfg.torch_dtype)
    if device.type != "meta":
        model.to_empty(device=device)
        model.tie_weights()       # to_empty gives every module its own tensor, untying weights
        # transformers' rotary module computes its tables at construction: on meta they are empty
        for name, buf in list(model.named_buffers()):
            if name.endswith("inv_freq"):
                buf.copy_(ops.rope_inv_freq(cfg.head_dim, cfg.rope_theta, device))
        _init_weights(model, seed)
    adapt(model, cfg)
    return model.eval()


@functools.lru_cache(maxsize=64)
def _weights_of(text: str) -> int:
    from transformers import AutoModelForCausalLM
    cfg = FamilyConfig(**json.loads(text))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg.hf_config(), dtype=cfg.torch_dtype)
    if cfg.tie_embeddings:
        model.tie_weights()
    return sum(p.numel() for p in model.parameters())     # a tied table once


def family_weights(cfg: FamilyConfig) -> int:
    """Weight elements of the family model (transformers' own parameters, a tied table counted once;
    not the adapter's re-laid-out copies): what one decode step reads, for the roofline."""
    return _weights_of(json.dumps(cfg.__dict__, sort_keys=True))


def make_family_step(family: str, cfg: FamilyConfig, seed: int = 0, device=None):
    """(adapted model, (token_ids [B], pos [B])): weights from `seed`, caches N(0, 1) from seed + 1,
    inputs from seed + 2, as the zoo's llama factory."""
    if cfg.family != family:
        raise ValueError(f"make_family_step({family!r}) got a config of family {cfg.family!r}")
    model = build_family_model(cfg, seed, device)
    if device is None or torch.device(device).type != "meta":
        fill_caches(model, seed + 1)
    ids, pos = step_inputs(cfg, seed)
    return model, (ids.to(device or "cpu"), pos.to(device or "cpu"))


# ---------------------------------------------------------------------------------------------
# What a level-5 problem file of a family is made of (curriculum/problems/mk_<family>_*.py)

def family_config(block: str, config: dict) -> FamilyConfig:
    """A family problem's (block, config dict) as its FamilyConfig; the block is the family's name."""
    cfg = config_from_dict(config)
    if cfg.family != block:
        raise ValueError(f"block {block!r} with a config of family {cfg.family!r}; they must agree")
    return cfg


class FamilyStep(Step):
    """A family problem's Model: transformers' model through its adapter, weights and prefilled
    caches from the judge's seed, activations in float32 (decode.Step, handed the family's builder)."""

    def __init__(self, block: str, config: dict):
        super().__init__(family_config(block, config), functools.partial(make_family_step, block))


class FamilyBaseline(Step):
    """What the judge times as eager PyTorch / CUDA graphs: the adapted model as it is (bf16)."""

    def __init__(self, block: str, config: dict):
        super().__init__(family_config(block, config), functools.partial(make_family_step, block), activations=None)


def family_inputs(config: dict) -> list[Tensor]:
    """A decode step's inputs from torch's global RNG (the judge seeds it): token ids and positions [batch]."""
    return [torch.randint(0, config["vocab"], (config["batch"],)),
            torch.randint(0, config["max_seq"], (config["batch"],))]


def family_roofline(block: str, config: dict) -> tuple[int, int]:
    """(flops, bytes) of one step at a mean context of half the cache (decode.step_roofline)."""
    cfg = FamilyConfig(**config)
    return step_roofline(family_weights(cfg), cfg.layers, cfg, config["max_seq"] // 2)


def transformers_logits(model: nn.Module, token_ids: Tensor, pos: Tensor) -> Tensor:
    """The decode step through transformers' own forward: for each sequence b, the unpatched model
    on token_ids[b] at position pos[b], with a DynamicCache prefilled from the adapter's caches'
    slots 0..pos[b]-1 (the keys there are stored rotated, as transformers stores them). Returns
    logits [B, vocab]. The adapter's caches are not changed."""
    import inspect

    from transformers import DynamicCache
    attns = attention_modules(model)
    cache_kw = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    out = []
    with native(model), torch.no_grad():
        for b in range(token_ids.shape[0]):
            p = int(pos[b])
            cache = DynamicCache()
            if p > 0:
                for i, a in enumerate(attns):
                    cache.update(a.k_cache[b:b + 1, :, :p].clone(), a.v_cache[b:b + 1, :, :p].clone(), i)
            kwargs = {cache_kw: cache}
            res = model(input_ids=token_ids[b:b + 1, None], position_ids=pos[b:b + 1, None],
                        use_cache=True, **kwargs)
            out.append(res.logits[0, -1])
    return torch.stack(out)
