"""Mamba's selective state-space scan (S6): input-dependent decay and input matrices, gated output."""
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 4
OP_TYPE = "selective_scan"
DTYPES = ["bfloat16", "float32"]
DESCRIPTION = ("Mamba selective scan on bf16 u, delta, z [batch_size, d_inner, seq_len] and B, C [batch_size, d_state, "
               "seq_len]: dt = softplus(delta + dt_bias[d]), A = -exp(A_log) [d_inner, d_state]; per channel d and state "
               "n, h_t = exp(dt_t A[d, n]) h_{t-1} + dt_t B[n, t] u_t from h = 0, y_t = sum_n C[n, t] h_t[n] + D[d] u_t, "
               "out = y * silu(z); fp32 parameters and state, output bf16 [batch_size, d_inner, seq_len].")
TAGS = ["scan", "ssm", "memory-bound", "bf16", "elementwise", "reduction"]
SPLIT = "train"

batch_size = 2
d_inner = 2048   # channels (Mamba-370M; d_model 1024, expanded 2x)
d_state = 16
seq_len = 2048
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "d_inner": 5, "d_state": 3, "seq_len": 37, "dtype": torch.float32}

# delta*16 pushes dt to ~50 and, with u and B also scaled, outputs to ~1e6, where two correct
# fp32 scans (log-depth and sequential) already differ by more than atol on outputs near zero;
# a +6 shift only makes dt larger (faster decay), which stays well-conditioned.
INPUT_TRANSFORMS = ("shift",)

# The production kernel this problem is timed against (issue 43): mamba-ssm's fused selective scan CUDA kernel
# (selective_scan_fn, with the softplus of delta + dt_bias, the D skip and the silu(z) gate inside it), what
# Mamba's own layers call. Its wheel builds against the local CUDA toolkit; where it is not installed the
# kernel is reported as skipped with that reason.
PRODUCTION = {"mamba_ssm_selective_scan": "mamba_ssm.ops.selective_scan_interface.selective_scan_fn (fused CUDA)"}


class Model(nn.Module):
    """A log-depth (Hillis-Steele) scan over the sequence: every decay lies in (0, 1], so combining
    steps multiplies decays and never divides by one. A loop over time would be equal but slow."""

    def __init__(self, d_inner: int, d_state: int):
        super().__init__()
        # Mamba's S4D-real init is A = -(1..d_state); random rates in that range, per channel
        self.A_log = nn.Parameter(torch.empty(d_inner, d_state).uniform_(1.0, d_state).log())
        self.D = nn.Parameter(torch.randn(d_inner))
        # softplus(dt_bias) between ~0.02 and ~0.3: memories from a few to ~100 steps, and a
        # state comparable in size to the skip term D * u
        self.dt_bias = nn.Parameter(torch.empty(d_inner).uniform_(-4.0, -1.0))

    def forward(self, u, delta, B, C, z):
        ct = torch.promote_types(u.dtype, torch.float32)  # fp32 for bf16 inputs, fp64 in a float64 run
        uf = u.to(ct)
        dt = F.softplus(delta.to(ct) + self.dt_bias.to(ct)[:, None])              # [b, d, l]
        decay = torch.exp(dt[..., None] * -torch.exp(self.A_log.to(ct))[:, None])   # [b, d, l, n]
        h = (dt * uf)[..., None] * B.to(ct).transpose(1, 2)[:, None]                # [b, d, l, n]
        # after the pass with shift s, h[t] holds the state fed by steps t-2s+1..t and decay[t]
        # the product of those steps' decays
        s = 1
        while s < h.shape[2]:
            h = torch.cat([h[:, :, :s], h[:, :, s:] + decay[:, :, s:] * h[:, :, :-s]], dim=2)
            decay = torch.cat([decay[:, :, :s], decay[:, :, s:] * decay[:, :, :-s]], dim=2)
            s *= 2
        y = (h * C.to(ct).transpose(1, 2)[:, None]).sum(-1) + self.D.to(ct)[:, None] * uf
        return (y * F.silu(z.to(ct))).to(u.dtype)


def get_inputs():
    u = torch.randn(batch_size, d_inner, seq_len, dtype=dtype)
    delta = torch.randn(batch_size, d_inner, seq_len, dtype=dtype)
    B = torch.randn(batch_size, d_state, seq_len, dtype=dtype)
    C = torch.randn(batch_size, d_state, seq_len, dtype=dtype)
    z = torch.randn(batch_size, d_inner, seq_len, dtype=dtype)
    return [u, delta, B, C, z]


def get_init_inputs():
    return [d_inner, d_state]


def production_baselines(model):
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    A = -torch.exp(model.A_log.float())

    def run(u, delta, B, C, z):
        return selective_scan_fn(u, delta, A, B, C, D=model.D.float(), z=z, delta_bias=model.dt_bias.float(),
                                 delta_softplus=True)
    return {"mamba_ssm_selective_scan": run}

def FLOPS():
    # sequential scan per (batch, channel, step, state): dt*A and its exp, the decay multiply and
    # the input add, C*h into y: ~7; per (batch, channel, step): softplus, dt*u, D*u, silu and the
    # gate: ~12
    return batch_size * d_inner * seq_len * (7 * d_state + 12)


def BYTES():
    acts = (3 * batch_size * d_inner + 2 * batch_size * d_state) * seq_len  # u, delta, z, B, C
    params = (d_inner * d_state + 2 * d_inner) * 4                          # fp32
    return (acts + batch_size * d_inner * seq_len) * dtype.itemsize + params
