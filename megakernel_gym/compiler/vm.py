"""The CPU VM's scheduler core: executes a plan's queues with real counter semantics.

`simulate` runs the SM queues under one interleaving chosen by `rng` (and, when `adversarial`,
biased toward starting tasks whose producers have not finished): a task at the head of its
queue may start once its waits are met; it finishes at once and bumps its counters. It
reports the first task that starts before a producer it depends on has finished (a race),
or a state where tasks remain and no SM can start one (a deadlock). It is the independent
check the validator is tested against; the numeric tile execution builds on it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from megakernel_gym.compiler.schedule import Plan


@dataclass
class SimResult:
    outcome: str            # ok | race | deadlock
    detail: str = ""
    order: list[int] | None = None


def simulate(plan: Plan, rng: random.Random | None = None, adversarial: bool = True) -> SimResult:
    rng = rng or random.Random(0)
    tg = plan.tg
    counters = {c.id: 0 for c in plan.counters}
    bumps = plan.counter_of_task()
    head = [0] * len(plan.queues)
    done: set[int] = set()
    order: list[int] = []
    total = sum(len(q) for q in plan.queues)
    while len(order) < total:
        ready = []
        for s, q in enumerate(plan.queues):
            if head[s] < len(q):
                t = q[head[s]]
                if all(counters.get(c, 0) >= thr for c, thr in plan.waits.get(t, [])):
                    ready.append(s)
        if not ready:
            stuck = [str(tg.tasks[q[head[s]]]) for s, q in enumerate(plan.queues) if head[s] < len(q)]
            return SimResult("deadlock", "no SM can start its next task: " + ", ".join(stuck[:6]), order)
        if adversarial:
            # prefer a task whose dependencies are not all done: the interleaving that exposes races
            eager = [s for s in ready if not tg.deps[plan.queues[s][head[s]]] <= done]
            s = rng.choice(eager) if eager and rng.random() < 0.8 else rng.choice(ready)
        else:
            s = rng.choice(ready)
        t = plan.queues[s][head[s]]
        missing = tg.deps[t] - done
        if missing:
            p = min(missing)
            return SimResult("race", f"{tg.tasks[t]} started before {tg.tasks[p]} finished", order)
        head[s] += 1
        done.add(t)
        order.append(t)
        for c in bumps.get(t, []):
            counters[c] += 1
    return SimResult("ok", "", order)


__all__ = ["simulate", "SimResult"]
