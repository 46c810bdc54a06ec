"""3x3 stride-1 average pooling with 'same' padding on NCHW maps, the pooling branch of Inception blocks."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "avgpool2d"
DTYPES = ["float32"]
TAGS = ["pooling", "vision", "memory-bound", "fp32"]
SPLIT = "heldout"
DESCRIPTION = ("AvgPool2d(kernel_size=3, stride=1, padding=1, count_include_pad=False) on fp32 NCHW x "
               "[batch_size, channels, height, width] = [32, 192, 35, 35]: same-size output; border windows "
               "average only the pixels inside the image (divide by 4 or 6 there, not 9).")

batch_size = 32
channels = 192  # Inception-v3's 35x35 stage
height = 35
width = 35
dtype = torch.float32

CPU_SIZES = {"batch_size": 2, "channels": 3, "height": 17, "width": 19}


class Model(nn.Module):
    """F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # count_include_pad=False: the padding is excluded from the divisor, so the borders are
        # a real case rather than a zero-fill a kernel could skip
        return torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # per output: up to 9 adds and one divide (interior windows)
    return 10 * batch_size * channels * height * width


def BYTES():
    return 2 * batch_size * channels * height * width * dtype.itemsize
