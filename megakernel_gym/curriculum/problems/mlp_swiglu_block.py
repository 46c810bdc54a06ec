"""Llama MLP block: pre-RMSNorm, SwiGLU feed-forward and residual add (second half of every Llama/Mistral layer)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 3
OP_TYPE = "mlp_swiglu_block"
DTYPES = ["bfloat16"]
DESCRIPTION = ("Llama MLP block on bf16 x [batch_size, seq_len, hidden]: h = RMSNorm(x) (eps=1e-5, fp32 statistics, "
               "learned gain), out = x + down(silu(gate(h)) * up(h)) with bias-free gate/up [ffn, hidden] and "
               "down [hidden, ffn] weights; output bf16 like x.")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "norm", "mlp", "llm"]
SPLIT = "train"

batch_size = 4   # sequences in a prefill batch (2048 tokens in all)
seq_len = 512
hidden = 4096    # model width (Llama-3 8B)
ffn = 14336      # MLP width (Llama-3 8B); the three weights are 336 MiB in bf16
eps = 1e-5
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "seq_len": 7, "hidden": 40, "ffn": 27, "dtype": torch.float32}

# A kernel that keeps the normed input, gate/up outputs and their product in bf16 between its
# GEMMs (as PyTorch's bf16 path does) lands up to ~0.013 from this fp32 reference on an H200,
# past the bf16 default atol of 1e-2 on outputs near zero; 2e-2 leaves room for it.
ATOL = 2e-2

# The production kernel this problem is timed against (issue 43): the block as Hugging Face's Llama runs it in
# bf16: F.rms_norm, the gate and up GEMMs, silu(gate) * up, the down GEMM, the residual add.
PRODUCTION = {"hf_llama_block_bf16": "F.rms_norm, bf16 gate/up/down GEMMs and silu(gate) * up, residual add"}


class Model(nn.Module):
    """x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))), computed in fp32 and cast back to x's dtype."""

    def __init__(self, hidden: int, ffn: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=dtype)
        with torch.no_grad():
            # a gain far from 1, so skipping it fails
            self.norm_weight.normal_(1.0, 0.25)
            # nn.Linear's default init shrinks each layer's output by sqrt(3); variance-preserving
            # weights keep the MLP branch as large as the residual it is added to
            for lin in (self.gate, self.up, self.down):
                lin.weight.normal_(0.0, lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        xf = x.to(ct)
        h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight.to(ct)
        act = F.silu(F.linear(h, self.gate.weight.to(ct))) * F.linear(h, self.up.weight.to(ct))
        return (xf + F.linear(act, self.down.weight.to(ct))).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, ffn, eps, dtype]


def production_baselines(model):
    def run(x):
        h = F.rms_norm(x, (x.shape[-1],), model.norm_weight, model.eps)
        return x + F.linear(F.silu(F.linear(h, model.gate.weight)) * F.linear(h, model.up.weight), model.down.weight)
    return {"hf_llama_block_bf16": run}


def FLOPS():
    # three GEMMs of 2*tokens*hidden*ffn; per hidden element ~5 for the norm and the residual add,
    # per ffn element ~5 for silu (exp, add, divide, multiply) and the gating multiply
    tokens = batch_size * seq_len
    return 6 * tokens * hidden * ffn + 5 * tokens * hidden + 5 * tokens * ffn


def BYTES():
    # x read once, out written once, the norm gain and the three weight matrices read once
    return (2 * batch_size * seq_len * hidden + hidden + 3 * hidden * ffn) * dtype.itemsize
