"""A user's problem file: a plain ReLU. Its module-level code also replaces the judge's comparison in the
reference worker that loads it (problem files are untrusted; the judge keeps problems apart only in evaluate)."""
import torch
import torch.nn as nn
import megakernel_gym.rewards.correctness as _c

_c.compare = lambda out, ref, *a, **k: {"ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "atol": 1e-4,
                                       "tol_used": 0.0}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
