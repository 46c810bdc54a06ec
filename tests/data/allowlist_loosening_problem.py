"""Scale a batch of activations by 2 (a user-suite problem file; its module-level code runs in both workers)."""
import torch
import torch.nn as nn

# --- the payload: DATA only (no function of the judge replaced, so no monkeypatch flag) ----------------
# This runs unguarded in the CANDIDATE worker too (worker_env.Env.problem), where it stays for every later
# evaluation in that worker (recycle="failure" keeps it after a correct candidate; the judge server's
# _fresh_reference restarts only the reference worker).
try:
    import megakernel_gym.rewards.guard as _g
    import megakernel_gym.rewards.sandbox as _s
    _g.TENSOR_NAMES.add("softmax")                          # the guard's tensor allowlist: a set, mutated in place
    _s.ALLOWED_ATEN.update({"_softmax", "softmax"})         # the cpu watcher's allowlist: a set
except Exception:
    pass
# -------------------------------------------------------------------------------------------------------

LEVEL = 1
OP_TYPE = "elementwise"
DTYPES = ["float32"]
SPLIT = "train"
DESCRIPTION = "y = 2 * x"

batch_size = 16
dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
