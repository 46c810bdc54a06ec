"""LayerNorm over channels then GELU on a conv feature map: each layer of the wav2vec 2.0 / HuBERT feature encoder."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
OP_TYPE = "layernorm_gelu"
DTYPES = ["float16"]
DESCRIPTION = ("y = gelu(layernorm(x)) for fp16 x [batch_size, channels, frames] (a conv output), the "
               "LayerNorm (eps=1e-5, affine) taken over channels (dim 1, stride frames) at each frame; exact "
               "erf GELU, fp32 math, output fp16 in x's layout.")
TAGS = ["norm", "memory-bound", "fp16", "fused", "elementwise", "reduction"]
SPLIT = "heldout"

batch_size = 8      # 10-second clips
channels = 512      # feature-encoder width
frames = 31999      # 160000 samples after the first conv (kernel 10, stride 5)
eps = 1e-5
dtype = torch.float16

CPU_SIZES = {"batch_size": 2, "channels": 37, "frames": 23, "dtype": torch.float32}

# The production kernel this problem is timed against (issue 43): the pair as a model runs it in fp16, PyTorch's
# LayerNorm kernel over the channels-last view, then F.gelu, then the layout back.
PRODUCTION = {"layer_norm_gelu_fp16": "F.layer_norm over the transposed view, then F.gelu, fp16"}


class Model(nn.Module):
    """Normalize each (batch, frame) column over channels, scale and shift, then GELU."""

    def __init__(self, channels: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype))
        # trained-looking affine parameters, so neither can be skipped
        with torch.no_grad():
            self.weight.normal_(1.0, 0.25)
            self.bias.normal_(0.0, 0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)
        xt = x.to(wide).transpose(1, 2)
        y = F.layer_norm(xt, (xt.shape[-1],), self.weight.to(wide), self.bias.to(wide), self.eps)
        return F.gelu(y).transpose(1, 2).contiguous().to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, channels, frames, dtype=dtype)]


def get_init_inputs():
    return [channels, eps, dtype]


def production_baselines(model):
    def run(x):
        y = F.layer_norm(x.transpose(1, 2), (x.shape[1],), model.weight, model.bias, model.eps)
        return F.gelu(y).transpose(1, 2).contiguous()
    return {"layer_norm_gelu_fp16": run}


def FLOPS():
    # per element: 7 for the norm (two sums, subtract, square, scale, weight, bias), ~5 for the GELU
    return 12 * batch_size * channels * frames


def BYTES():
    return (2 * batch_size * channels * frames + 2 * channels) * dtype.itemsize
