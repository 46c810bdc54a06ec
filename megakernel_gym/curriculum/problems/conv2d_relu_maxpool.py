"""3x3 conv + bias, ReLU, then 2x2 max-pool: the end of each VGG block (VGG-16 block 2 here)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
OP_TYPE = "conv2d_relu_maxpool"
DTYPES = ["bfloat16"]
DESCRIPTION = ("y = maxpool2x2(relu(conv2d(x, W, b, padding=1))) for bf16 NCHW x [batch_size, in_channels, "
               "height, width], W [out_channels, in_channels, 3, 3], b [out_channels]; the pool has stride 2 "
               "and drops an odd last row/column; output [batch_size, out_channels, height//2, width//2].")
TAGS = ["conv", "compute-bound", "bf16", "fused"]
SPLIT = "train"

batch_size = 16
in_channels = 128   # VGG-16 conv2_2
out_channels = 128
height = 112
width = 112
dtype = torch.bfloat16

# 11 x 9 maps: the pool drops the last row, and no tile divides either side
CPU_SIZES = {"batch_size": 2, "in_channels": 4, "out_channels": 6, "height": 11, "width": 9,
             "dtype": torch.float32}


class Model(nn.Module):
    """conv -> relu -> 2x2/2 max-pool; relu and max are exact, so the conv's one rounding is the only one."""

    def __init__(self, in_channels: int, out_channels: int, dtype: torch.dtype):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=True, dtype=dtype)
        # the default bias is ~+-0.03 here; a wider one moves which values the ReLU clips
        with torch.no_grad():
            self.conv.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(self.conv(x)), kernel_size=2, stride=2)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [in_channels, out_channels, dtype]


def FLOPS():
    # the convolution (2 per multiply-add), then bias add and relu per conv output; the pool's
    # 3 compares per output are counted in the relu's share
    conv_out = batch_size * out_channels * height * width
    return 2 * conv_out * in_channels * 9 + 2 * conv_out


def BYTES():
    # x, W, b read once, the pooled output written once (the full-size conv output stays on chip)
    pooled = batch_size * out_channels * (height // 2) * (width // 2)
    return (batch_size * in_channels * height * width + out_channels * in_channels * 9 + out_channels
            + pooled) * dtype.itemsize
