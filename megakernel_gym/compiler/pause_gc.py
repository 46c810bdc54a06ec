"""The cyclic garbage collector paused around the compiler's big passes over a plan.

A 1B-shaped plan keeps ~600,000 objects alive (the lowered task graph, its boxes and spans). A
pass that builds tens of thousands of short-lived lists and sets (plan building, validation, cost
prediction) sets off collections that walk all of them: 0.58 s for a validation that takes 0.25 s
without (bench/sim_speed.py). Those passes make no reference cycles, so what they drop is freed by
reference counting as before; only the collector's walks wait until the pass is over."""
from __future__ import annotations

import functools
import gc


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


__all__ = ["gc_paused"]
