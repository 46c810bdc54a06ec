"""Output projection scaled per channel (LayerScale) and added to the residual stream, as in DINOv2/CaiT ViTs."""
import torch
import torch.nn as nn

from megakernel_gym.curriculum.numerics import matmul_fp32 as _matmul_fp32

LEVEL = 2
OP_TYPE = "matmul_scale_residual"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = residual + gamma * (x @ W^T + b) for bf16 x [num_tokens, dim] (attention output), "
               "residual [num_tokens, dim], W [dim, dim], b and gamma [dim] (ViT-g/14 attention out-proj "
               "with LayerScale).")
TAGS = ["matmul", "compute-bound", "bf16", "fused", "elementwise"]
SPLIT = "heldout"

num_tokens = 32 * 257  # 32 images x 257 tokens (256 patches + CLS): not a multiple of any tile
dim = 1536             # ViT-g width
dtype = torch.bfloat16

CPU_SIZES = {"num_tokens": 31, "dim": 44, "dtype": torch.float32}

# The production kernel this problem is timed against (issue 43): the layer as a bf16 model runs it, cuBLAS's GEMM
# with the bias in its epilogue (torch.addmm), then residual + gamma * y in one fused elementwise (torch.addcmul).
PRODUCTION = {"addmm_addcmul_bf16": "torch.addmm (bias in cuBLAS's epilogue) then torch.addcmul, bf16"}


class Model(nn.Module):
    """residual + gamma * linear(x), the GEMM result unrounded and the epilogue in fp32."""

    def __init__(self, dim: int, dtype: torch.dtype):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=True, dtype=dtype)
        self.gamma = nn.Parameter(torch.empty(dim, dtype=dtype))
        # LayerScale starts near 1e-5 but trained values spread widely; draws around 1 keep the
        # projection visible next to the residual, and a wide bias keeps its add from being skippable
        with torch.no_grad():
            self.gamma.uniform_(0.25, 1.5)
            self.proj.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = _matmul_fp32(x, self.proj.weight)
        y = y + self.proj.bias.to(y.dtype)
        return (residual.to(y.dtype) + self.gamma.to(y.dtype) * y).to(x.dtype)


def get_inputs():
    x = torch.randn(num_tokens, dim, dtype=dtype)
    residual = torch.randn(num_tokens, dim, dtype=dtype)
    return [x, residual]


def get_init_inputs():
    return [dim, dtype]


def production_baselines(model):
    w, b, g = model.proj.weight, model.proj.bias, model.gamma
    return {"addmm_addcmul_bf16": lambda x, residual: torch.addcmul(residual, g, torch.addmm(b, x, w.t()))}


def FLOPS():
    # the product, then bias add, scale and residual add per output
    return 2 * num_tokens * dim * dim + 3 * num_tokens * dim


def BYTES():
    # x, residual, W, b, gamma read once, y written once
    return (3 * num_tokens * dim + dim * dim + 2 * dim) * dtype.itemsize
