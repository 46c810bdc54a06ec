# expect: correct
# problem: layernorm_gelu
# LayerNorm over the strided channel axis (stride = frames) of a [B, C, T] tensor: a [C x frames] tile per program, two-pass variance, exact-erf GELU, stored in the input's layout
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_gelu_channels(x_ptr, w_ptr, b_ptr, y_ptr, C, T, eps,
                      BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr):
    bz = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_C)
    cmask = c < C
    mask = cmask[:, None] & (t[None, :] < T)
    offs = bz * C * T + c[:, None] * T + t[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / C
    d = tl.where(mask, x - mean[None, :], 0.0)
    var = tl.sum(d * d, axis=0) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + c, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)
    y = d * rstd[None, :] * w[:, None] + b[:, None]
    g = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(y_ptr + offs, g.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(channels, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C, T = x.shape
        y = torch.empty_like(x)
        bt = 8
        _ln_gelu_channels[(B, triton.cdiv(T, bt))](x, self.weight, self.bias, y, C, T, self.eps,
                                                   BLOCK_C=triton.next_power_of_2(C), BLOCK_T=bt)
        return y
