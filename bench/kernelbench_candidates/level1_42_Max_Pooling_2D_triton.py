# problem: level1/42_Max_Pooling_2D.py
# kind: triton
# MaxPool2d (kernel/stride/padding/dilation from the module, floor mode): one program per (plane, output row) and block of output columns, padded taps read -inf, NaN propagates like torch; int64 plane offsets
# cpu_sizes: {"batch_size": 1, "channels": 2, "height": 11, "width": 13}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _maxpool2d(x_ptr, y_ptr, H, W, OH, OW,
               KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, DIL: tl.constexpr,
               BLOCK_W: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)          # (plane, output row) flattened
    plane = r // OH
    oh = r - plane * OH
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    valid = ow < OW
    x_plane = x_ptr + plane * H * W
    best = tl.full([BLOCK_W], float("-inf"), tl.float32)
    nan_seen = tl.zeros([BLOCK_W], dtype=tl.int1)
    zero_w = tl.zeros([BLOCK_W], dtype=tl.int64)
    for kh in tl.static_range(KS):
        ih = oh * STRIDE - PAD + kh * DIL + zero_w       # as a vector (a scalar mask breaks the interpreter)
        row_ok = (ih >= 0) & (ih < H)
        for kw in tl.static_range(KS):
            iw = ow * STRIDE - PAD + kw * DIL
            inside = valid & row_ok & (iw >= 0) & (iw < W)
            v = tl.load(x_plane + ih * W + iw, mask=inside, other=float("-inf")).to(tl.float32)
            nan_seen = nan_seen | (v != v)
            best = tl.maximum(best, v)
    best = tl.where(nan_seen, float("nan"), best)
    tl.store(y_ptr + r * OW + ow, best.to(y_ptr.dtype.element_ty), mask=valid)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.maxpool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N, C, H, W = x.shape
        k, s, p, d = self.maxpool.kernel_size, self.maxpool.stride, self.maxpool.padding, self.maxpool.dilation
        OH = (H + 2 * p - d * (k - 1) - 1) // s + 1
        OW = (W + 2 * p - d * (k - 1) - 1) // s + 1
        y = torch.empty((N, C, OH, OW), dtype=x.dtype, device=x.device)
        block_w = min(512, triton.next_power_of_2(OW))
        grid = (N * C * OH, triton.cdiv(OW, block_w))
        _maxpool2d[grid](x, y, H, W, OH, OW, KS=k, STRIDE=s, PAD=p, DIL=d, BLOCK_W=block_w,
                         num_warps=4 if block_w >= 256 else 1)
        return y
