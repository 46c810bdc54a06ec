"""How long a reader waits past its producers beyond their hops, as the cost model prices it: a wait
group's tail (the spread of like tasks' finishes, group_tail and spread_z) and the busy part of a hop as
each reader's group waits it (busy_scale). Taken out of costmodel.py (issue 39, session 53).
"""
from __future__ import annotations

import numpy as np

from megakernel_gym.compiler.codecost import light_tasks
from megakernel_gym.compiler.devices import DeviceSpec
from megakernel_gym.compiler.schedule import Plan


# Like tasks do not finish together on the GPU. Over the H200's task dumps (session 53, layers 4-8 of 47
# schedules, four families), a wait group's last producer signalled 0.5-2 us after its median one where the
# group had 64 or more producers, 0.25-1 us with 8-63, where the list schedule, drawing every task of an op
# alike, has them finish together; the GPU's hop behind such a group, from its last producer's signal, was
# the quiet one. group_tail prices the spread a reader waits past its group's last producer as drawn: the
# device's group_tail_us times the expected largest of the group's producers' N standard normal draws past
# their mean (spread_z). busy_group instead scales a hop's busy part (busy_hop_us past the quiet wait) as each
# reader's group waits it, by the group's spread over that of `busy_group` producers: one producer, the quiet hop;
# busy_light scales the busy part a light reader waits (a small op's or a norm's task: from their last
# producer's signal to their own every H200 dump has them 1.0-1.3 us shorter than the sim, the matmuls after
# the same producers within 0.3).
def spread_z(n) -> np.ndarray:
    """The expected largest of n standard normal draws (the extreme-value expansion: 0 for one, ~0.75
    for two, ~1.5 for 8, ~2.6 for 128)."""
    n = np.asarray(n, dtype=float)
    log_n = np.log(np.maximum(n, 2.0))     # (one draw: 0, below)
    r = np.sqrt(2.0 * log_n)
    z = r - (np.log(log_n) + np.log(4.0 * np.pi) - 2.0 * np.euler_gamma) / (2.0 * r)
    return np.where(n > 1, np.maximum(z, 0.0), 0.0)


def group_tail(gsize, dev: DeviceSpec) -> np.ndarray:
    """Per wait group of `gsize` producers, how long past its last producer its readers see it done
    (see above)."""
    return dev.group_tail_us * spread_z(gsize) if dev.group_tail_us else np.zeros(len(gsize))


def busy_scale(plan: Plan, hops: str, needs, gsize, dev: DeviceSpec) -> np.ndarray:
    """Per wait group (costmodel._wait_csr's `needs` CSR pair and group sizes), the share of its producers'
    busy hop part its readers wait (see above): its spread over busy_group producers' (1 without
    busy_group), times busy_light where its reader is a light task (under "ll" hops, where each task
    with inputs is the one reader of a group of its own, numbered in task order)."""
    scale = spread_z(gsize) / spread_z(dev.busy_group) if dev.busy_group else np.ones(len(gsize))
    if dev.busy_light != 1.0 and hops == "ll":
        small, own, _, _ = light_tasks(plan)
        readers = np.flatnonzero(np.diff(needs[0]) > 0)
        scale = scale * np.where((small + own)[readers] > 0, dev.busy_light, 1.0)
    return scale


__all__ = ["spread_z", "group_tail", "busy_scale"]
