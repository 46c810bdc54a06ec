"""RMSNorm feeding a projection: a Llama decoder layer's input norm followed by its fused QKV GEMM."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
OP_TYPE = "rmsnorm_matmul"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = (rmsnorm(x) * g) @ W^T for bf16 x [batch_size, hidden], RMSNorm gain g [hidden] (eps=1e-6, "
               "fp32 statistics, normalized x rounded to bf16 before the GEMM), W [out_features, hidden].")
TAGS = ["norm", "matmul", "compute-bound", "bf16", "fused"]
SPLIT = "train"

batch_size = 4096    # tokens in a prefill chunk
hidden = 4096        # model width (Llama-3 8B)
out_features = 6144  # fused q/k/v width: 32 query + 2 x 8 kv heads of 128
eps = 1e-6
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 27, "hidden": 60, "out_features": 41, "dtype": torch.float32}

# The production kernels this problem is timed against (issue 43): PyTorch's fused RMSNorm (F.rms_norm), then the
# bf16 GEMM, as a model written for speed runs the pair, and the same with Liger-Kernel's RMSNorm (the `baselines`
# extra) as a Hugging Face model patched by Liger runs it.
PRODUCTION = {"rms_norm_linear_bf16": "F.rms_norm (PyTorch's fused kernel) then F.linear, bf16",
              "liger_rms_norm_linear": "Liger-Kernel's RMSNorm (Triton, fp32 statistics) then F.linear, bf16"}


class Model(nn.Module):
    """Llama RMSNorm (fp32 math, cast back to x's dtype) then a bias-free linear layer."""

    def __init__(self, hidden: int, out_features: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(hidden, dtype=dtype))
        self.proj = nn.Linear(hidden, out_features, bias=False, dtype=dtype)
        # trained gains are far from 1; random ones keep the multiply from being skippable
        with torch.no_grad():
            self.norm_weight.normal_(1.0, 0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        h = (xf * inv_rms * self.norm_weight.to(xf.dtype)).to(x.dtype)
        return F.linear(h, self.proj.weight)


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, out_features, eps, dtype]


def production_baselines(model):
    w, p = model.norm_weight, model.proj.weight

    def liger(x):               # imported when run: a missing library is reported as such, by name
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return F.linear(LigerRMSNormFunction.apply(x, w, model.eps, 0.0, "gemma", False), p)
    return {"rms_norm_linear_bf16": lambda x: F.linear(F.rms_norm(x, (x.shape[-1],), w, model.eps), p),
            "liger_rms_norm_linear": liger}


def FLOPS():
    # the product, plus ~4 per input element for the norm (square, sum, two scales)
    return 2 * batch_size * hidden * out_features + 4 * batch_size * hidden


def BYTES():
    # x, the gain and W read once, y written once; the normalized x need not round-trip HBM
    return (batch_size * hidden + hidden + out_features * hidden + batch_size * out_features) * dtype.itemsize
