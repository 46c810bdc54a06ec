# problem: level3/2_ShallowWideMLP.py
# kind: triton
# each Linear as x @ W^T in 128x256x16 (or 64x128x32 when few tiles) IEEE-fp32 tiles (int64 row offsets into the multi-GiB weights), bias and the following ReLU fused in its epilogue
# cpu_sizes: {"batch_size": 5, "input_size": 70, "hidden_layer_sizes": [80, 66], "output_size": 37}
import torch
import torch.nn as nn
import triton
import triton.language as tl

GROUP_M = 8
# (BM, BN, BK, num_warps, num_stages): the large tile while it still gives >= MIN_PROGRAMS programs, else a smaller one
BIG_TILE = (128, 256, 16, 8, 3)
SMALL_TILE = (64, 128, 32, 4, 3)
MIN_PROGRAMS = 128


def _pick(M, N):
    if triton.cdiv(M, BIG_TILE[0]) * triton.cdiv(N, BIG_TILE[1]) >= MIN_PROGRAMS:
        return BIG_TILE
    return SMALL_TILE


@triton.jit
def _linear_act(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr, RELU: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    # grouped launch order: GROUP_M row blocks walk the same weight column tiles together (L2 reuse)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    # out-of-range rows/columns are clamped for the loads (their results are masked at the store)
    rm_ld = (rm % M).to(tl.int64)
    rn_ld = (rn % N).to(tl.int64)
    a_ptrs = x_ptr + rm_ld[:, None] * stride_xm + rk[None, :]
    b_ptrs = w_ptr + rn_ld[None, :] * stride_wn + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k0 + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        a_ptrs += BK
        b_ptrs += BK
    nmask = rn < N
    acc = acc + tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    mask = (rm[:, None] < M) & nmask[None, :]
    y_ptrs = y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def _linear(h, linear, relu):
    w = linear.weight.contiguous()
    N, K = w.shape
    M = h.shape[0]
    y = torch.empty((M, N), dtype=h.dtype, device=h.device)
    BM, BN, BK, NUM_WARPS, NUM_STAGES = _pick(M, N)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _linear_act[grid](h, w, linear.bias, y, M, N, K, h.stride(0), w.stride(0), y.stride(0),
                      BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M, EVEN_K=(K % BK == 0), RELU=relu,
                      num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return y


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_layer_sizes, output_size):
        super(ModelNew, self).__init__()

        layers = []
        current_input_size = input_size

        for hidden_size in hidden_layer_sizes:
            layers.append(nn.Linear(current_input_size, hidden_size))
            layers.append(nn.ReLU())
            current_input_size = hidden_size

        layers.append(nn.Linear(current_input_size, output_size))

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        h = x.contiguous().view(-1, x.shape[-1])
        mods = list(self.network)
        i = 0
        while i < len(mods):
            # each Linear, with the ReLU that follows it fused into its epilogue
            relu = i + 1 < len(mods) and isinstance(mods[i + 1], nn.ReLU)
            h = _linear(h, mods[i], relu)
            i += 2 if relu else 1
        return h.view(*x.shape[:-1], h.shape[-1])
