"""SwiGLU: the gated first half of a Llama/Mistral MLP, silu(x W_gate^T) * (x W_up^T)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "linear_swiglu"
DTYPES = ["bfloat16"]
DESCRIPTION = ("h = silu(x @ W_gate^T) * (x @ W_up^T) for bf16 x [batch_size, hidden], W_gate and W_up "
               "[intermediate, hidden], no biases; output [batch_size, intermediate] (Llama-3 8B MLP).")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "elementwise"]
SPLIT = "train"

batch_size = 4096     # tokens in a prefill chunk
hidden = 4096         # model width (Llama-3 8B)
intermediate = 14336  # MLP width; the two weights are 112 MiB each in bf16
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 29, "hidden": 44, "intermediate": 53, "dtype": torch.float32}

# The production kernels this problem is timed against (issue 43): the bf16 SwiGLU as Hugging Face's Llama MLP
# runs it (two GEMMs, then silu(gate) * up), and gpt-fast's form with the gate and up weights in one GEMM.
PRODUCTION = {"hf_llama_mlp_bf16": "F.silu(F.linear(x, W_gate)) * F.linear(x, W_up), bf16",
              "fused_gate_up_bf16": "one bf16 GEMM over [W_gate; W_up], then silu(gate) * up (gpt-fast)"}


class Model(nn.Module):
    """Two bias-free projections of the same x, combined as silu(gate) * up in fp32."""

    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        # unit-variance pre-activations put the gate across SiLU's curved region instead of
        # its nearly linear middle (the default init gives std ~0.58)
        with torch.no_grad():
            self.gate_proj.weight.normal_(0.0, hidden ** -0.5)
            self.up_proj.weight.normal_(0.0, hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = _matmul_fp32(x, self.gate_proj.weight)
        up = _matmul_fp32(x, self.up_proj.weight)
        return (F.silu(gate) * up).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, intermediate, dtype]


def production_baselines(model):
    wg, wu = model.gate_proj.weight, model.up_proj.weight
    w = torch.cat([wg, wu]).contiguous()

    def fused(x):
        gate, up = F.linear(x, w).chunk(2, dim=-1)
        return F.silu(gate) * up
    return {"hf_llama_mlp_bf16": lambda x: F.silu(F.linear(x, wg)) * F.linear(x, wu), "fused_gate_up_bf16": fused}


def FLOPS():
    # two products, then per output ~5: silu (exp, add, divide, multiply) and the gating multiply
    return 4 * batch_size * hidden * intermediate + 5 * batch_size * intermediate


def BYTES():
    # x once, both weights once, h once (gate and up never need to leave the chip)
    return (batch_size * hidden + 2 * intermediate * hidden + batch_size * intermediate) * dtype.itemsize
