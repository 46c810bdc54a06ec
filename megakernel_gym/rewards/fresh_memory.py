"""What the judge does to a candidate's fresh allocations in its checked calls: fills them with what no kernel
computes by chance, so an output left unwritten shows in the comparison (sandbox.Inspector); and the same for a
loaded export (policies.export.load_kernel), so a kernel cannot tell the two apart by what its scratch holds.
"""
from __future__ import annotations

# the aten ops that hand back fresh, uninitialized memory
POISON_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}


def poison(torch, t) -> None:
    """Fill a fresh allocation with what no kernel computes by chance (NaN, True, the integer maximum), so an
    output left unwritten shows in the comparison."""
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def poison_if_fresh(torch, name: str, out) -> None:
    """Poison `out` where aten op `name` handed it back fresh (POISON_OPS)."""
    if name in POISON_OPS and isinstance(out, torch.Tensor):
        poison(torch, out)


def poisoning_mode(torch):
    """A TorchDispatchMode that poisons every fresh allocation as the judge's checked calls do: a loaded export
    runs under it (policies.export.load_kernel), so a kernel that tells the judge by what its scratch holds
    computes in use what it computed when judged (red team 14's read a fresh torch.empty and computed softmax only
    where every element was NaN)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Poison(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            poison_if_fresh(torch, func.overloadpacket.__name__, out)
            return out
    return _Poison()
