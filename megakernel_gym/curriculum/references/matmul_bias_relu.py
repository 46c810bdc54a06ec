"""Reference candidate for problems/matmul_bias_relu.py: a tiled Triton GEMM with the bias add
and the ReLU fused into its epilogue, so the product never goes to memory unactivated.

Tiles are visited in groups of GROUP_M row-tiles so that neighbouring programs reuse the same
columns of W while they are still in L2. The K loop's trip count is a constexpr (fixed per
problem), which also keeps the kernel runnable in Triton 3.6's CPU interpreter under
numpy >= 2.4, where a loop bounded by a runtime scalar fails (triton-lang/triton#9171).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                             stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, K_TILES: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    group = pid // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # x tile [BLOCK_M, BLOCK_K]; W is [N, K] row-major, read as its transpose [BLOCK_K, BLOCK_N]
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(K_TILES):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(w_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - kt * BLOCK_K
            a = tl.load(x_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(w_ptrs, mask=mask_n[None, :] & (offs_k[:, None] < k_left), other=0.0)
        # bf16 operands run on tensor cores with fp32 accumulation; "ieee" only changes fp32
        # operands, keeping them exact fp32 instead of tf32
        acc = tl.dot(a, b, acc, input_precision="ieee")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    y = tl.maximum(acc + bias[None, :], 0.0)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        # holds linear.weight / linear.bias under the reference's names; values come from
        # the reference's state_dict, the forward never calls it
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        K = x.shape[-1]
        N = w.shape[0]
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        y = torch.empty((*x.shape[:-1], N), device=x.device, dtype=x.dtype)
        if x.is_cuda:
            # H100/H200 bf16: 128x256 tiles, 64-deep K steps, 3-stage pipeline (~144 KB smem)
            bm, bn, bk, warps, stages = 128, 256, 64, 8, 3
        else:
            # the interpreter: small tiles so the tiny test shapes still cover several tiles,
            # a partial K step and partial edge tiles
            bm, bn, bk, warps, stages = 16, 32, 32, 4, 1
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _linear_bias_relu_kernel[grid](
            x2, w, self.linear.bias, y, M, N, K,
            x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), N, 1,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, K_TILES=triton.cdiv(K, bk), EVEN_K=(K % bk == 0),
            num_warps=warps, num_stages=stages)
        return y
