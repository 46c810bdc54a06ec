"""A decode step as a judge's reference, whatever builds the model (the zoo's own blocks, zoo.py, or
transformers' families, families.py): Step, handed its config and its builder; the KV caches' prefill
and the fresh copy before every call; the step's inputs and roofline. The zoo and the families both
build on this module, and neither imports the other's internals to do it.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def fill_caches(module: nn.Module, seed: int) -> None:
    """Fill every KV cache with N(0, 1) values, as if a context had been prefilled."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buf in sorted(module.named_buffers()):
            if name.endswith(("k_cache", "v_cache")) and buf.device.type != "meta":
                buf.copy_(torch.randn(buf.shape, generator=gen).to(buf.dtype))


class FreshCaches(nn.Module):
    """A zoo module whose every call starts from the same KV caches.

    A decode step writes the new token's k/v into its caches, so calling a zoo module twice
    at different positions makes the second answer depend on the first call. As a judge's
    reference (curriculum level 5) a step must be a pure function of its inputs: this wrapper
    copies the prefilled caches back before each call (the copy is a few percent of a step's
    weight traffic). The caches stay non-persistent: state_dict() is the inner model's weights.
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self._names = [n for n, _ in inner.named_buffers() if n.endswith(("k_cache", "v_cache"))]
        for n in self._names:
            self.register_buffer("prefill__" + n.replace(".", "__"), inner.get_buffer(n).clone(),
                                 persistent=False)

    def forward(self, *args: Tensor) -> Tensor:
        with torch.no_grad():
            for n in self._names:
                self.inner.get_buffer(n).copy_(self.get_buffer("prefill__" + n.replace(".", "__")))
        return self.inner(*args)


class _UpcastLinear(nn.Linear):
    """nn.Linear on activations wider than its weight: the weight (and bias) widened for the product."""

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)
        b = self.bias if self.bias is None or self.bias.dtype == x.dtype else self.bias.to(x.dtype)
        return nn.functional.linear(x, w, b)


class _UpcastLayerNorm(nn.LayerNorm):
    """nn.LayerNorm (GPT-2's) on activations wider than its weight and bias: both widened."""

    def forward(self, x: Tensor) -> Tensor:
        w = None if self.weight is None else self.weight.to(x.dtype)
        b = None if self.bias is None else self.bias.to(x.dtype)
        return nn.functional.layer_norm(x, self.normalized_shape, w, b, self.eps)


class _UpcastEmbedding(nn.Embedding):
    """nn.Embedding whose rows come out in float32 (the activation dtype), whatever the table's."""

    def forward(self, ids: Tensor) -> Tensor:
        return super().forward(ids).float()


class Step(nn.Module):
    """A decode step as a judge's reference (curriculum level 5), handed its config and its builder
    (`make(cfg, seed=, device=) -> (module, example inputs)`: the zoo's or a family's): built from the global
    torch RNG (so the judge's init seed decides the weights and prefilled caches), called like
    the block itself, and a pure function of its inputs (FreshCaches).

    Outputs: the block's output, plus -- for blocks with attention -- the k and v rows this
    step writes into each layer's cache ([layers, batch, kv_heads, head_dim] for a model,
    [batch, kv_heads, head_dim] for one block): a decode step's effect on its caches is part of
    its answer, and without it a kernel could skip the k/v projections unseen.

    `activations="float32"` (the reference): weights and KV caches stay in the config's dtype,
    every activation, product and the residual stream are float32. A bf16 residual stream drifts
    by a few percent over 16 layers, more than one layer's attention contributes to the logits,
    so only an accurate reference lets the judge see a skipped layer. `activations=None` runs
    the zoo model as it is (the bf16 eager model the baselines should time).
    """

    def __init__(self, cfg, make: Callable, activations: str | None = "float32"):
        super().__init__()
        seed = int(torch.randint(0, 2**31 - 1, (), device="cpu"))   # the CPU RNG, whatever the default device
        device = torch.get_default_device()
        if device.type == "cpu" and torch.cuda.is_available():
            # drawing 1B-scale random weights is seconds on a CPU and milliseconds on the GPU the
            # judge moves the model to anyway (the cpu backend hides CUDA, so it stays on the CPU)
            device = torch.device("cuda", torch.cuda.current_device())
        inner, _ = make(cfg, seed=seed, device=device)   # weights from seed, caches from seed + 1
        if activations is not None and _DTYPES[activations] != cfg.torch_dtype:
            # same modules and state_dict keys, wider arithmetic: swap the classes in place
            for mod in inner.modules():
                if type(mod) is nn.Linear:
                    mod.__class__ = _UpcastLinear
                elif type(mod) is nn.Embedding:
                    mod.__class__ = _UpcastEmbedding
                elif type(mod) is nn.LayerNorm:
                    mod.__class__ = _UpcastLayerNorm
        # the zoo model as it is takes activations in its own dtype; the float32 one widens them
        self._cast_inputs = cfg.torch_dtype if activations is None else None
        self.step = FreshCaches(inner)
        self._k = [n for n in self.step._names if n.endswith("k_cache")]
        self._v = [n for n in self.step._names if n.endswith("v_cache")]

    def forward(self, *args: Tensor):
        if self._cast_inputs is not None:
            args = tuple(a.to(self._cast_inputs) if a.is_floating_point() else a for a in args)
        out = self.step(*args)
        if not self._k:
            return out
        pos = args[-1]
        rows = torch.arange(pos.shape[0], device=pos.device)
        inner = self.step.inner
        k = [inner.get_buffer(n)[rows, :, pos, :] for n in self._k]
        v = [inner.get_buffer(n)[rows, :, pos, :] for n in self._v]
        if len(k) == 1:
            return out, k[0], v[0]
        return out, torch.stack(k), torch.stack(v)


def _positions(cfg, gen: torch.Generator) -> Tensor:
    return torch.randint(0, cfg.max_seq, (cfg.batch,), generator=gen, dtype=torch.int64)


def step_inputs(cfg, seed: int = 0) -> tuple[Tensor, Tensor]:
    """A decode step's (token ids [batch], pos [batch]) drawn on the CPU from seed + 2: what the zoo's
    and the families' factories feed a model built from `seed` (the sim prices a step at the
    positions it attends, costmodel.attended_positions; a bench names the ones it timed)."""
    gen = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, cfg.vocab, (cfg.batch,), generator=gen, dtype=torch.int64)
    return ids, _positions(cfg, gen)


def step_roofline(w: int, layers: int, cfg, mean_context: int) -> tuple[int, int]:
    """(flops, bytes) of one decode step that reads `w` weights and attends over `mean_context` cached
    tokens in `layers` layers: 2 flops per weight per sequence plus the attention's; bytes are the
    weights read once plus the KV cache slots read."""
    window = (getattr(cfg, "extra", None) or {}).get("sliding_window") or 0
    if window:      # a sliding window attends at most its last `window` positions
        mean_context = min(mean_context, window)
    attn_flops = 4 * layers * cfg.q_heads * cfg.head_dim * mean_context
    kv_bytes = 2 * layers * cfg.batch * cfg.kv_heads * cfg.head_dim * mean_context
    item = cfg.torch_dtype.itemsize
    return cfg.batch * (2 * w + attn_flops), (w + kv_bytes) * item
