# problem: level1/94_MSELoss.py
# kind: triton
# mean((p - t)^2) as a deterministic two-stage tree reduction: per-program fp32 partial sums over 64K-element spans (int64 offsets), then one program sums the partials and divides by n into a 0-d output
# cpu_sizes: {"batch_size": 7, "input_shape": (151153,)}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sq_diff_partials(p_ptr, t_ptr, part_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    start = pid * (BLOCK * ITERS)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(ITERS):
        o = start + i * BLOCK + offs
        m = o < n
        p = tl.load(p_ptr + o, mask=m, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + o, mask=m, other=0.0).to(tl.float32)
        d = p - t
        acc += d * d
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _finish_mean(part_ptr, out_ptr, n_parts, n_f, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_parts, BLOCK):
        idx = start + offs
        acc += tl.load(part_ptr + idx, mask=idx < n_parts, other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr, (total / n_f).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p = predictions.contiguous()
        t = targets.contiguous()
        assert p.shape == t.shape, "this kernel expects predictions and targets of one shape"
        n = p.numel()
        out = torch.empty((), dtype=p.dtype, device=p.device)
        block, iters = 4096, 16
        n_parts = max(1, triton.cdiv(n, block * iters))
        partials = torch.empty((n_parts,), dtype=torch.float32, device=p.device)
        _sq_diff_partials[(n_parts,)](p, t, partials, n, BLOCK=block, ITERS=iters, num_warps=8)
        _finish_mean[(1,)](partials, out, n_parts, float(n), BLOCK=1024, num_warps=4)
        return out
