# expect: correct
# problem: fixtures/honest/bmm_fp32.py
# fp32 batched GEMM summed as a pairwise tree: one kernel writes each K tile's partial product to scratch (slots padded to a power of two with zeros), then log2(slots) launches add slot pairs until one is left
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tile_products(a_ptr, b_ptr, part_ptr, M, N, K, SLOTS,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    bz = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    kt = tl.program_id(2)
    n_tiles_n = tl.cdiv(N, BN)
    rm = (tile // n_tiles_n) * BM + tl.arange(0, BM)
    rn = (tile % n_tiles_n) * BN + tl.arange(0, BN)
    k = kt * BK + tl.arange(0, BK)
    a = tl.load(a_ptr + bz * M * K + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
    b = tl.load(b_ptr + bz * K * N + k[:, None] * N + rn[None, :], mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
    p = tl.dot(a, b, input_precision="ieee")
    dst = part_ptr + (bz * SLOTS + kt) * M * N + rm[:, None] * N + rn[None, :]
    tl.store(dst, p, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _pair_add(src_ptr, dst_ptr, MN, src_slots, half, BLOCK: tl.constexpr):
    # dst[b, i] = src[b, i] + src[b, i + half] for i < half
    bz = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1)
    offs = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    lo = tl.load(src_ptr + (bz * src_slots + i) * MN + offs, mask=mask, other=0.0)
    hi = tl.load(src_ptr + (bz * src_slots + i + half) * MN + offs, mask=mask, other=0.0)
    tl.store(dst_ptr + (bz * half + i) * MN + offs, lo + hi, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        B, M, K = a.shape
        N = b.shape[2]
        bm, bn, bk = 32, 32, 32
        k_tiles = triton.cdiv(K, bk)
        slots = triton.next_power_of_2(k_tiles)
        # slots beyond the last K tile hold zeros, so every pair add is well defined
        part = torch.zeros((B, slots, M, N), dtype=torch.float32, device=a.device)
        _tile_products[(B, triton.cdiv(M, bm) * triton.cdiv(N, bn), k_tiles)](a, b, part, M, N, K, slots,
                                                                            BM=bm, BN=bn, BK=bk)
        c = torch.empty((B, M, N), dtype=a.dtype, device=a.device)
        block = 512
        src, width = part, slots
        while width > 1:
            half = width // 2
            dst = c if half == 1 else torch.empty((B, half, M, N), dtype=torch.float32, device=a.device)
            _pair_add[(B, half, triton.cdiv(M * N, block))](src, dst, M * N, width, half, BLOCK=block)
            src, width = dst, half
        if slots == 1:
            _pair_add[(B, 1, triton.cdiv(M * N, block))](torch.zeros((B, 2, M, N), dtype=torch.float32, device=a.device),
                                                         c, M * N, 2, 1, BLOCK=block)
        return c
