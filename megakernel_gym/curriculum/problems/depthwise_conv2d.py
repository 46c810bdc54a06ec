"""A 7x7 depthwise convolution with bias, the spatial mixing layer of ConvNeXt blocks."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "depthwise_conv2d"
DTYPES = ["float32"]
TAGS = ["conv", "memory-bound", "vision", "fp32"]
SPLIT = "train"
DESCRIPTION = ("Conv2d(channels, channels, 7, padding=3, groups=channels, bias=True) on fp32 NCHW x "
               "[batch_size, channels, 56, 56] = [24, 96, 56, 56]: each channel convolved with its own 7x7 "
               "filter (weight [96, 1, 7, 7]) plus its bias; same-size output.")

batch_size = 24
channels = 96   # ConvNeXt-T stage 1
height = 56
width = 56
kernel_size = 7
dtype = torch.float32

# A 13 x 11 map is barely wider than the 7x7 filter, so most outputs touch the zero padding.
CPU_SIZES = {"batch_size": 2, "channels": 5, "height": 13, "width": 11}


class Model(nn.Module):
    """nn.Conv2d with groups == channels."""

    def __init__(self, channels: int, kernel_size: int, dtype: torch.dtype):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels,
                              bias=True, dtype=dtype)
        # the default bias is within +-1/7 (fan-in 49); a trained-looking spread keeps it from being skipped
        with torch.no_grad():
            self.conv.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [channels, kernel_size, dtype]


def FLOPS():
    # a multiply and an add per (output element, tap), plus the bias add
    return batch_size * channels * height * width * (2 * kernel_size * kernel_size + 1)


def BYTES():
    return (2 * batch_size * channels * height * width
            + channels * kernel_size * kernel_size + channels) * dtype.itemsize
