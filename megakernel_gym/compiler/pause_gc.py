"""The cyclic garbage collector paused around the compiler's big passes over a plan.

A 1B-shaped plan keeps ~600,000 objects alive (the lowered task graph, its boxes and spans). A
pass that builds tens of thousands of short-lived lists and sets (plan building, validation, cost
prediction) sets off collections that walk all of them: 0.58 s for a validation that takes 0.25 s
without (bench/sim_speed.py). Those passes make no reference cycles, so what they drop is freed by
reference counting as before; only the collector's walks wait until the pass is over."""
from __future__ import annotations

import atexit
import functools
import gc
import threading


def gc_paused(fn):
    """fn with the cyclic collector off while it runs (and back as it was after, also on error)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()
    return wrapper


_FROZEN = threading.Lock()
_AT_EXIT = []


def keep_built_structures_out_of_gc() -> None:
    """Move every object the collector tracks now into its permanent generation (gc.freeze), once a
    problem's long-lived structures are built (its captured graph, lowering and plan: most of the
    ~700,000 objects a 1B-shaped problem keeps). The collector's full walks then skip them: on the
    1B decoder they took 130-360 ms each and came every few edit steps (bench/sim_speed.py), more
    than the steps themselves. What is frozen is still freed by reference counting; only cyclic
    garbage alive at the moment stays, so this is called once per problem a process builds, not per
    episode. At exit they are unfrozen, so the interpreter's last collection sees them again."""
    with _FROZEN:
        if not _AT_EXIT:
            atexit.register(gc.unfreeze)
            _AT_EXIT.append(True)
        gc.freeze()


__all__ = ["gc_paused", "keep_built_structures_out_of_gc"]
