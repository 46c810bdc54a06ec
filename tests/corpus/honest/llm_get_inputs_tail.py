# expect: correct
# problem: layernorm
# LLM boilerplate: the problem's sizes, get_inputs() (torch.randn) and get_init_inputs() repeated after ModelNew
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(X, W, B, Y, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0)
    b = tl.load(B + cols, mask=mask, other=0.0)
    tl.store(Y + row * stride + cols, xc * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    """LayerNorm with a fused Triton kernel."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=eps, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        layernorm_fwd_kernel[(M,)](x, self.ln.weight, self.ln.bias, y, x.stride(0), N, self.ln.eps,
                                   BLOCK_SIZE=triton.next_power_of_2(N))
        return y


batch_size = 2048
dim = 4096
eps = 1e-5
dtype = torch.float32


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [dim, eps, dtype]
