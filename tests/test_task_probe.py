"""bench/task_probe.py's summaries of a probed run, on the CPU with probe times made up for a tiny
expert plan: the straggler summary names the op whose last task signals late and the SMs whose
tasks took their first phase slowly, which a median hides."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _probes(plan, first_on_sm: dict[int, float], late: dict[str, float]):
    """Each task: dequeued 0, started 1, input 2, first 2 + its SM's first phase (1 us unless
    first_on_sm says), last +1, signalled +0.5 (+ late[op] for the op's last task)."""
    sm_of = {t: s for s, q in enumerate(plan.queues) for t in q}
    probes, spans = [], []
    last_of = {op: max(ids) for op, ids in plan.tg.by_op.items() if ids}
    for t in plan.tg.tasks:
        first = 2 + first_on_sm.get(sm_of[t.id], 1.0)
        sig = first + 1.5 + (late.get(t.op, 0.0) if t.id == last_of[t.op] else 0.0)
        probes.append({"dequeued": 0.0, "started": 1.0, "input": 2.0, "first": first, "last": first + 1, "signalled": sig})
        spans.append((1.0, sig))
    return probes, spans


def test_stragglers_name_the_late_op_and_the_slow_sms(graphs):
    sys.path.insert(0, str(ROOT / "bench"))
    from task_probe import op_table, stragglers

    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    probes, spans = _probes(plan, {}, {"layers.1.attn.decode_attention": 4.0})
    rows = {r["op"]: r for r in stragglers(plan, [probes, probes], [spans, spans], range(0, 2))}
    # one of two layers ran late by 4 us: the median over layers and runs lies between; no other op waits
    assert 0 < rows["attn.decode_attention"]["spread_us"] <= 4.0
    assert all(r["spread_us"] == 0 for k, r in rows.items() if k != "attn.decode_attention")
    assert all(not r["slow_first_share"] and r["slow_sms"] == [] for r in rows.values())
    # tasks on SM 3 take their first phase 3x as long: every op with tasks there names SM 3, and SM 3 alone
    probes, spans = _probes(plan, {3: 3.0}, {})
    rows = {r["op"]: r for r in stragglers(plan, [probes, probes], [spans, spans], range(0, 2))}
    slow = [r for r in rows.values() if r["slow_first_share"]]
    assert slow and all(r["slow_sms"][0][0] == 3 and len(r["slow_sms"]) == 1 for r in slow)
    assert all(0 < r["slow_first_share"] < 1 for r in slow)
    # the phases table still gives the medians (1 us first phase everywhere but SM 3)
    assert all(r["first"] == 1.0 for r in op_table(plan, [probes], range(0, 2)) if r["first"] is not None)
