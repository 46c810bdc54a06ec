# expect: correct
# problem: maxpool2d
# strided max pool with window/stride/padding as constexprs taken from the module; padded taps load -inf, one program per output row block of a plane
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _maxpool(x_ptr, y_ptr, H, W, OH, OW,
             KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = idx < OH * OW
    oh = idx // OW
    ow = idx % OW
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for kh in tl.static_range(KS):
        for kw in tl.static_range(KS):
            ih = oh * STRIDE - PAD + kh
            iw = ow * STRIDE - PAD + kw
            inside = valid & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            v = tl.load(x_ptr + plane * H * W + ih * W + iw, mask=inside, other=float("-inf")).to(tl.float32)
            best = tl.maximum(best, v)
    tl.store(y_ptr + plane * OH * OW + idx, best.to(y_ptr.dtype.element_ty), mask=valid)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N, C, H, W = x.shape
        k, s, p = self.kernel_size, self.stride, self.padding
        OH = (H + 2 * p - k) // s + 1
        OW = (W + 2 * p - k) // s + 1
        y = torch.empty((N, C, OH, OW), dtype=x.dtype, device=x.device)
        block = 64
        _maxpool[(N * C, triton.cdiv(OH * OW, block))](x, y, H, W, OH, OW, KS=k, STRIDE=s, PAD=p, BLOCK=block)
        return y
