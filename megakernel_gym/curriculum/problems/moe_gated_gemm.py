"""Mixtral-style mixture-of-experts SwiGLU layer: top-2 of 8 experts per token, tokens grouped per expert."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 4
OP_TYPE = "moe_gated_gemm"
DTYPES = ["bfloat16", "float32"]
DESCRIPTION = ("MoE layer on bf16 x [num_tokens, hidden] with fp32 router_logits [num_tokens, num_experts]: each token "
               "picks its top_k=2 experts by logit (ties go to the lower expert index), gates = softmax of those two "
               "logits, out = sum over them of gate * down_e(silu(gate_e(x)) * up_e(x)) with w_gate/w_up "
               "[num_experts, ffn, hidden] and w_down [num_experts, hidden, ffn]; output bf16.")
TAGS = ["matmul", "moe", "compute-bound", "bf16", "fused", "gather"]
SPLIT = "heldout"

num_tokens = 2048   # a prefill chunk
hidden = 4096
ffn = 14336
num_experts = 8     # Mixtral 8x7B: the expert weights are 2.6 GiB in bf16
top_k = 2
dtype = torch.bfloat16

CPU_SIZES = {"num_tokens": 29, "hidden": 12, "ffn": 9, "dtype": torch.float32}

# The router logits come in as an input, as in vLLM's fused-MoE kernel (the router's own GEMV is a
# tiny separate op). Were they computed here, a correct kernel's fp32 summation order would move
# them by ~1e-6 of their spread, and a token whose 2nd and 3rd logits lie that close picks
# another expert: ~1e-6 of tokens by our estimate, ~1% of judged runs (2048 tokens, 6 seeds),
# and no tolerance absorbs a swapped expert (rounding logits to bf16 swapped 0.2% of tokens).
# With the logits given, reference and kernel choose from the same numbers; the stable-sort
# rule settles exact ties.

# A kernel that keeps gate/up outputs, their product and each expert's output in bf16 (as
# vLLM's fused MoE does) lands up to ~0.008 from this fp32 reference on an H200 with outputs
# ~0.35 in size; 1.5e-2 leaves room for it.
ATOL = 1.5e-2

# SwiGLU grows like x^2: x*16 gives outputs ~140 and x+6 outputs ~15, and the bf16 rounding of
# the expert GEMMs' terms (~1e-3 of the outputs' rms) then exceeds the tolerance on outputs
# near zero, failing correct bf16 kernels; so only plain inputs.
INPUT_TRANSFORMS = ()

# The production kernels this problem is timed against (issue 43): torch._grouped_mm, the grouped bf16 GEMM
# (CUTLASS, sm90) that torchtitan's MoE layers call, over the tokens sorted by expert; and the loop over experts
# in bf16 as Hugging Face's Mixtral runs it.
PRODUCTION = {"grouped_mm": "torch._grouped_mm over the tokens sorted by expert (torchtitan's MoE)",
              "hf_mixtral_loop_bf16": "a loop over experts, bf16 F.linear GEMMs (Hugging Face's Mixtral)"}


class Model(nn.Module):
    def __init__(self, num_experts: int, hidden: int, ffn: int, top_k: int, dtype: torch.dtype):
        super().__init__()
        self.top_k = top_k
        # variance-preserving weights keep each expert's output O(1)
        self.w_gate = nn.Parameter(torch.randn(num_experts, ffn, hidden, dtype=dtype) * hidden ** -0.5)
        self.w_up = nn.Parameter(torch.randn(num_experts, ffn, hidden, dtype=dtype) * hidden ** -0.5)
        self.w_down = nn.Parameter(torch.randn(num_experts, hidden, ffn, dtype=dtype) * ffn ** -0.5)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        # a stable descending sort puts the lower expert index first among equal logits
        top_logits, top_idx = router_logits.sort(dim=-1, descending=True, stable=True)
        gates = torch.softmax(top_logits[:, : self.top_k].to(ct), dim=-1)  # [tokens, top_k]
        top_idx = top_idx[:, : self.top_k]
        xf = x.to(ct)
        out = torch.zeros_like(xf)
        for e in range(self.w_gate.shape[0]):
            tok, slot = torch.where(top_idx == e)  # the tokens routed to expert e, grouped
            h = xf[tok]
            act = F.silu(h @ self.w_gate[e].to(ct).T) * (h @ self.w_up[e].to(ct).T)
            # each token appears at most once per expert, so this add is deterministic
            out.index_add_(0, tok, (act @ self.w_down[e].to(ct).T) * gates[tok, slot, None])
        return out.to(x.dtype)


def get_inputs():
    x = torch.randn(num_tokens, hidden, dtype=dtype)
    router_logits = torch.randn(num_tokens, num_experts, dtype=torch.float32)
    return [x, router_logits]


def get_init_inputs():
    return [num_experts, hidden, ffn, top_k, dtype]


def production_baselines(model):
    import torch.nn.functional as F
    k, num_experts = model.top_k, model.w_gate.shape[0]
    wg, wu, wd = (w.transpose(-2, -1) for w in (model.w_gate, model.w_up, model.w_down))   # [E, in, out] views

    def route(router_logits):
        top_logits, top_idx = router_logits.sort(dim=-1, descending=True, stable=True)
        return torch.softmax(top_logits[:, :k], dim=-1), top_idx[:, :k]

    def grouped(x, router_logits):
        gates, top_idx = route(router_logits)
        flat = top_idx.reshape(-1)
        order = flat.argsort(stable=True)
        tok = order // k
        offs = torch.bincount(flat, minlength=num_experts).cumsum(0).to(torch.int32)
        h = x[tok]
        act = F.silu(torch._grouped_mm(h, wg, offs=offs)) * torch._grouped_mm(h, wu, offs=offs)
        y = torch._grouped_mm(act, wd, offs=offs) * gates.reshape(-1)[order, None].to(x.dtype)
        return torch.zeros_like(x).index_add_(0, tok, y)

    def hf_loop(x, router_logits):
        gates, top_idx = route(router_logits)
        out = torch.zeros_like(x)
        for e in range(num_experts):
            tok, slot = torch.where(top_idx == e)
            h = x[tok]
            act = F.silu(F.linear(h, model.w_gate[e])) * F.linear(h, model.w_up[e])
            out.index_add_(0, tok, F.linear(act, model.w_down[e]) * gates[tok, slot, None].to(x.dtype))
        return out
    return {"grouped_mm": grouped, "hf_mixtral_loop_bf16": hf_loop}


def FLOPS():
    # per (token, chosen expert): three GEMMs of 2*hidden*ffn, ~5 per ffn element for silu and
    # the gating multiply, 2 per hidden element for the weighted sum; top-k and softmax are noise
    return num_tokens * top_k * (6 * hidden * ffn + 5 * ffn + 2 * hidden)


def BYTES():
    # every expert receives tokens at this size, so all expert weights are read once
    weights = 3 * num_experts * hidden * ffn
    return (2 * num_tokens * hidden + weights) * dtype.itemsize + num_tokens * num_experts * 4
