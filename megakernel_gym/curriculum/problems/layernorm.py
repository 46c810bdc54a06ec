"""LayerNorm over the hidden dimension with a learned scale and shift."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "layernorm"
DTYPES = ["float32"]
TAGS = ["norm", "reduction", "memory-bound", "fp32"]
SPLIT = "train"
DESCRIPTION = "LayerNorm (eps=1e-5, elementwise affine) over the last dim of fp32 activations [batch_size, dim]."

batch_size = 2048  # tokens in a prefill chunk
dim = 4096         # hidden size
eps = 1e-5
dtype = torch.float32

CPU_SIZES = {"batch_size": 11, "dim": 300}


class Model(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight + bias along the last dimension."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=eps, dtype=dtype)
        # nn.LayerNorm starts at weight=1, bias=0, which would let a kernel that skips the
        # affine step pass; trained-looking values make both parameters matter.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.25)
            self.ln.bias.normal_(0.0, 0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [dim, eps, dtype]


def FLOPS():
    # per element: sum for the mean, subtract, square, sum for the variance, scale by rstd,
    # multiply by weight, add bias
    return 7 * batch_size * dim


def BYTES():
    # x read once, y written once, weight and bias read once
    return (2 * batch_size * dim + 2 * dim) * dtype.itemsize
