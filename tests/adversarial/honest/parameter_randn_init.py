# expect: correct
# problem: matmul_bias_relu
# family: honest twin of nn_init_in_forward / parameter_returned
# the KernelBench leaderboard's style: nn.Parameter(torch.randn(shape)) drawn in __init__ under the
# problem's names (linear.weight, linear.bias), torch.nn.init in __init__, read by a Triton kernel
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, K_TILES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(K_TILES):
        k = kt * BLOCK_K + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * K + k[None, :], mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * K + k[:, None], mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class _Holder(nn.Module):
    def __init__(self, n, k, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, k, dtype=dtype) / math.sqrt(k))
        self.bias = nn.Parameter(torch.zeros(n, dtype=dtype))
        nn.init.uniform_(self.bias, -0.5, 0.5)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dtype):
        super().__init__()
        self.linear = _Holder(out_features, in_features, dtype)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        x = x.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        _linear_relu[(triton.cdiv(M, 16), triton.cdiv(N, 32))](x, w, b, y, M, N, K, BLOCK_M=16, BLOCK_N=32,
                                                                BLOCK_K=32, K_TILES=triton.cdiv(K, 32))
        return y
