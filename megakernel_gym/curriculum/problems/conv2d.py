"""A 3x3 convolution from a ResNet bottleneck block, the bulk of a CNN's compute."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "conv2d"
DTYPES = ["bfloat16"]
TAGS = ["conv", "compute-bound", "vision", "bf16"]
SPLIT = "train"
DESCRIPTION = ("Conv2d(in_channels, out_channels, 3, stride=1, padding=1, bias=False) on bf16 NCHW x "
               "[batch_size, 128, 28, 28] with weight [128, 128, 3, 3] -> [batch_size, 128, 28, 28], batch_size = 128 "
               "(ResNet-50 stage 2); an implicit GEMM with K = 128 * 9, fp32 accumulation, bf16 result.")

batch_size = 128    # images
in_channels = 128   # bottleneck width of ResNet-50's second stage
out_channels = 128
height = 28
width = 28
dtype = torch.bfloat16

# Channel counts 3 -> 5 and an 11 x 13 map: nothing lines up with a tile, and in != out.
CPU_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 11, "width": 13,
             "dtype": torch.float32}


class Model(nn.Module):
    """nn.Conv2d with a 3x3 kernel, zero padding 1 and no bias (BatchNorm follows in ResNet)."""

    def __init__(self, in_channels: int, out_channels: int, dtype: torch.dtype):
        super().__init__()
        # PyTorch's default (Kaiming-uniform) init keeps the outputs at unit-ish scale
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [in_channels, out_channels, dtype]


def FLOPS():
    # a multiply and an add per (output element, input channel, tap)
    return 2 * batch_size * out_channels * height * width * in_channels * 9


def BYTES():
    return (batch_size * (in_channels + out_channels) * height * width
            + out_channels * in_channels * 9) * dtype.itemsize
