# expect: correct
# problem: matmul_softmax
# router GEMM whose output tile spans every expert, so the row softmax runs in the epilogue on the fp32 logits (padded experts masked to -inf)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gate_softmax(x_ptr, w_ptr, p_ptr, M, E, K,
                  BM: tl.constexpr, BE: tl.constexpr, BK: tl.constexpr, K_TILES: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    re = tl.arange(0, BE)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BE), dtype=tl.float32)
    for t in range(K_TILES):
        k = t * BK + rk
        a = tl.load(x_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + re[None, :] * K + k[:, None], mask=(re[None, :] < E) & (k[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    logits = tl.where(re[None, :] < E, acc, float("-inf"))
    mx = tl.max(logits, axis=1)
    e = tl.exp(logits - mx[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    tl.store(p_ptr + rm[:, None] * E + re[None, :], p.to(p_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (re[None, :] < E))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, num_experts: int, dtype: torch.dtype):
        super().__init__()
        self.gate = nn.Linear(hidden, num_experts, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.gate.weight.contiguous()
        E, K = w.shape
        x2 = x.contiguous().view(-1, K)
        M = x2.shape[0]
        probs = torch.empty((*x.shape[:-1], E), dtype=torch.float32, device=x.device)
        bm, bk = 16, 16
        _gate_softmax[(triton.cdiv(M, bm),)](x2, w, probs, M, E, K, BM=bm, BE=triton.next_power_of_2(E),
                                             BK=bk, K_TILES=triton.cdiv(K, bk))
        return probs
