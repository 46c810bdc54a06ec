"""Numerics shared by the built-in problems' reference models (problems/*.py import these)."""
import torch


def matmul_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w^T returned in fp32 (fp64 for fp64 inputs). On the GPU a bf16 GEMM accumulates in fp32
    anyway; keeping that result unrounded makes the reference the accurate answer, as a fused
    kernel's epilogue sees it, and cuBLAS's fp32-output GEMM keeps the eager baseline fast."""
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(x, w.t(), out_dtype=torch.float32)
    wide = torch.promote_types(x.dtype, torch.float32)
    return x.to(wide) @ w.to(wide).t()
