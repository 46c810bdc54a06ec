"""Causal linear attention with the elu+1 feature map (Katharopoulos et al., "Transformers are RNNs")."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 4
OP_TYPE = "linear_attention"
DTYPES = ["bfloat16"]
DESCRIPTION = ("Causal linear attention on bf16 q, k, v [batch_size, num_heads, seq_len, head_dim]: with phi(x) = "
               "elu(x) + 1, out_t = phi(q_t) . S_t / (phi(q_t) . z_t), where S_t = sum_{s<=t} phi(k_s) v_s^T and "
               "z_t = sum_{s<=t} phi(k_s); output bf16 like v. Aim for the chunked/recurrent O(seq_len) form.")
TAGS = ["attention", "scan", "compute-bound", "bf16", "reduction"]
SPLIT = "train"

batch_size = 4
num_heads = 16
seq_len = 2048
head_dim = 128   # the recurrent state per head is head_dim x head_dim
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "num_heads": 3, "seq_len": 19, "head_dim": 6, "dtype": torch.float32}

# phi > 0 makes every weight positive, so out_t is a weighted mean of the values seen so far,
# ~1/sqrt(t) in size: ~0.03 late in the sequence. The bf16 default atol of 1e-2 would accept
# zeros there; a chunked kernel with bf16 phi(q), phi(k) stays within ~8e-4 of this fp32
# reference on an H200, and 2e-3 leaves room for it.
ATOL = 2e-3

# x*16 sharpens phi(q).phi(k) 256-fold and scales v by 16, where that bf16 rounding of phi
# misses the tolerance; a shift keeps the weights smooth.
INPUT_TRANSFORMS = ("shift",)

# The production kernel this problem is timed against (issue 43): flash-linear-attention's chunked causal
# linear attention (fla.ops.linear_attn.chunk_linear_attn, Triton), normalized, on phi(q) and phi(k) computed
# as the layer computes them (its own scale cancels in the normalization). Installed by the [baselines] extra;
# where it is not, the kernel is reported as skipped with that reason.
PRODUCTION = {"fla_chunk_linear_attn": "flash-linear-attention's chunk_linear_attn (Triton), normalized, in fp32"}


class Model(nn.Module):
    """The quadratic form of the same causal sum: clear and exact, O(seq_len^2) memory."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ct = torch.promote_types(q.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        fq, fk = F.elu(q.to(ct)) + 1, F.elu(k.to(ct)) + 1
        weights = (fq @ fk.transpose(-1, -2)).tril()  # [b, h, t, s]: phi(q_t) . phi(k_s), s <= t
        out = (weights @ v.to(ct)) / weights.sum(dim=-1, keepdim=True)
        return out.to(v.dtype)


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []


def production_baselines(model):
    from fla.ops.linear_attn import chunk_linear_attn

    def run(q, k, v):   # fla takes [batch, seq, heads, dim]
        # phi and the kernel in fp32, as the reference: in bf16 (phi rounded, then fla's normalizer) 68 of
        # 16.8M outputs missed the tolerance on an H200, by up to 0.03
        fq, fk = F.elu(q.float()) + 1, F.elu(k.float()) + 1
        o = chunk_linear_attn(fq.transpose(1, 2), fk.transpose(1, 2), v.float().transpose(1, 2), normalize=True)
        o = o[0] if isinstance(o, tuple) else o
        return o.transpose(1, 2).to(v.dtype)
    return {"fla_chunk_linear_attn": run}

def FLOPS():
    # recurrent form per (batch, head, token): phi of q and k (~3 each per element), the state
    # update S += phi(k) v^T and z += phi(k) (2*d^2 + d), the readout phi(q).S and phi(q).z
    # (2*d^2 + 2*d) and the divide (d)
    d = head_dim
    return batch_size * num_heads * seq_len * (4 * d * d + 10 * d)


def BYTES():
    return 4 * batch_size * num_heads * seq_len * head_dim * dtype.itemsize
