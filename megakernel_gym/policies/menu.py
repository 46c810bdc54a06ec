"""The edit menu: single IR edits worth trying, each for every layer alike, and whether the IR takes one.
The random, search and learned policies draw from it (baselines.py, learn.py), and the LM policy checks
its decisions with try_edit (lm.py).
"""
from __future__ import annotations


MENU_FACTORS = (0.5, 2.0)


def edit_menu(ir) -> list[str]:
    """Single edits worth trying on an IR, each applied to every layer alike (`layers.*.` patterns):
    tile sizes halved or doubled, op-wide or per-tile counters, prefetch depth 1 on weight readers,
    and fusing a matmul into its sole elementwise consumer. Not every one is valid for every IR:
    apply_edits says which are."""
    from megakernel_gym.ir_exposure.edits import sole_consumer
    from megakernel_gym.compiler.legality import tile_size
    groups: dict[str, str] = {}
    for name in ir.ops:
        groups.setdefault(_every_layer(name), name)
    out = []
    for pattern, name in groups.items():
        info = ir.facts.info[name]
        size = tile_size(ir.facts, ir.knobs, name)
        for factor in MENU_FACTORS:
            best = info.nearest_allowed(size * factor)
            if best != size:
                out.append(f"tile {pattern} n={best}")
        out.append(f"counter {pattern} {'tile' if ir.knobs.counters.get(name) == 'op' else 'op'}")
        if info.reads_weight and not ir.knobs.prefetch.get(name):
            out.append(f"prefetch {pattern} depth=1")
        into = sole_consumer(ir, name, ("elementwise",)) if info.op.kind == "matmul" else None
        if into and name not in ir.fused:
            out.append(f"fuse {pattern} into {_every_layer(into)}")
    return list(dict.fromkeys(out))


def _every_layer(name: str) -> str:
    """`layers.3.mlp.up_proj` -> `layers.*.mlp.up_proj` (one edit for every layer alike); others as they are."""
    parts = name.split(".")
    return ".".join(["layers", "*"] + parts[2:]) if parts[0] == "layers" and len(parts) > 2 else name


def try_edit(ir, text: str):
    """The IR with the edit applied, or None where the IR refuses it (or its plan does not validate)."""
    from megakernel_gym.compiler.validate import ScheduleError
    from megakernel_gym.ir_exposure import EditError, IRError, apply_edits
    try:
        new = apply_edits(ir, text)
        new.plan()
        return new
    except (EditError, IRError, ScheduleError):
        return None
