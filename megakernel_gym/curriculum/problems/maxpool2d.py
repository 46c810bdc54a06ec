"""3x3 stride-2 max pooling on NCHW feature maps, the downsampling step after a ResNet stem."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "maxpool2d"
DTYPES = ["bfloat16"]
TAGS = ["pooling", "vision", "memory-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("MaxPool2d(kernel_size=3, stride=2, padding=1) on bf16 NCHW x [batch_size, channels, height, width] "
               "= [32, 64, 112, 112] -> [32, 64, 56, 56]; padded positions never win (they count as -inf).")

batch_size = 32
channels = 64   # ResNet stem output
height = 112
width = 112     # the stem's 7x7 stride-2 conv halves a 224x224 image
kernel_size = 3
stride = 2
padding = 1
dtype = torch.bfloat16

# 17 x 19 is odd in both directions, so the last window of a row and column is cut by the border.
CPU_SIZES = {"batch_size": 2, "channels": 3, "height": 17, "width": 19, "dtype": torch.float32}


def _out(n: int) -> int:
    return (n + 2 * padding - kernel_size) // stride + 1


class Model(nn.Module):
    """F.max_pool2d(x, kernel_size, stride, padding)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool2d(x, self.kernel_size, self.stride, self.padding)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [kernel_size, stride, padding]


def FLOPS():
    # one comparison per window element per output
    return batch_size * channels * _out(height) * _out(width) * kernel_size * kernel_size


def BYTES():
    # windows overlap, but each input element need only come from memory once
    return (batch_size * channels * (height * width + _out(height) * _out(width))) * dtype.itemsize
