"""3x3 conv, eval-mode BatchNorm and ReLU: the conv-BN-ReLU unit of every ResNet block (ResNet-50 layer2 here)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
OP_TYPE = "conv2d_batchnorm_relu"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = relu(batchnorm_eval(conv2d(x, W, padding=1))) for bf16 NCHW x [batch_size, channels, "
               "height, width], W [channels, channels, 3, 3] (no conv bias); BatchNorm uses running_mean, "
               "running_var, weight, bias [channels] and eps=1e-5 (foldable into the conv).")
TAGS = ["conv", "compute-bound", "bf16", "fused", "norm"]
SPLIT = "train"

batch_size = 128   # inference batch
channels = 128     # ResNet-50 layer2 3x3 conv
height = 28
width = 28
eps = 1e-5
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "channels": 7, "height": 9, "width": 11, "dtype": torch.float32}


class Model(nn.Module):
    """conv (bf16, one rounding), then (y - mean) / sqrt(var + eps) * weight + bias and relu in fp32."""

    def __init__(self, channels: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False, dtype=dtype)
        # trained statistics and affine parameters, all far from the 0/1 defaults so none can be
        # skipped; the conv output here has variance ~1/3
        self.weight = nn.Parameter(torch.empty(channels, dtype=dtype).uniform_(0.5, 1.5))
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype).normal_(0.0, 0.3))
        self.register_buffer("running_mean", torch.empty(channels, dtype=dtype).normal_(0.0, 0.3))
        self.register_buffer("running_var", torch.empty(channels, dtype=dtype).uniform_(0.15, 0.6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)
        y = self.conv(x).to(wide)
        y = F.batch_norm(y, self.running_mean.to(wide), self.running_var.to(wide), self.weight.to(wide),
                         self.bias.to(wide), training=False, eps=self.eps)
        return torch.relu(y).to(x.dtype)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [channels, eps, dtype]


def FLOPS():
    # the convolution, then a multiply-add (BN folded to scale and shift) and a max per output
    out = batch_size * channels * height * width
    return 2 * out * channels * 9 + 3 * out


def BYTES():
    # x and y once, W and the four BN vectors once
    return (2 * batch_size * channels * height * width + channels * channels * 9 + 4 * channels) * dtype.itemsize
