"""bench/attention_positions.py: a step timed at several positions; its attention tasks' phases read
from the probes, and the adversary file's worst searched row picked."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

pytest.importorskip("torch")
from attention_positions import attention_stats, worst_climb  # noqa: E402

from megakernel_gym.compiler import ZOO, capture  # noqa: E402
from megakernel_gym.ir_exposure import make_ir  # noqa: E402


def test_attention_stats_are_medians_over_the_attention_tasks_and_its_window_in_its_layer():
    g = capture(*ZOO["llama-tiny"](device="meta"), "llama-tiny")
    plan = make_ir(g, num_sms=8).plan()
    attn = {t.id for t in plan.tg.tasks if g.op(t.op).kind == "decode_attention"}
    assert attn
    probes, spans = [], []
    for run in range(2):
        p, s = [], []
        for t in plan.tg.tasks:
            layer = int(t.op.split(".")[1]) if t.op.startswith("layers.") else 0
            t0 = 100.0 * layer + (10.0 if t.id in attn else 1.0)
            work = 3.0 + run if t.id in attn else 1.0                  # first + rows: 3 us, then 4
            p.append({"dequeued": t0 - 1, "started": t0, "input": t0 + 0.5, "first": t0 + 0.5 + work / 3,
                      "last": t0 + 0.5 + work, "signalled": t0 + 0.75 + work})
            s.append((t0, t0 + 0.75 + work))
        probes.append(p)
        spans.append(s)
    got = attention_stats(plan, probes, spans)
    assert got["work"] == pytest.approx(3.5) and got["input"] == pytest.approx(0.5)
    assert got["tail"] == pytest.approx(0.25) and got["busy"] == pytest.approx(4.25)
    # the layer's first task starts at 1 us, its attention at 10: from 9 us, to 9 + its busy time
    assert got["window_us"] == pytest.approx([9.0, 13.25])


def test_the_worst_searched_row_is_the_one_the_sim_gets_most_wrong(tmp_path, monkeypatch):
    import attention_positions as ap
    rows = [{"target": "m", "label": "climb 0 from expert", "correct": True, "sim_speedup_vs_expert": 1.05,
             "gpu_speedup_vs_expert": 0.90},
            {"target": "m", "label": "climb 1 from default", "correct": True, "sim_speedup_vs_expert": 0.80,
             "gpu_speedup_vs_expert": 0.81},
            {"target": "m", "label": "climb 2 from expert", "correct": False, "sim_speedup_vs_expert": 2.0,
             "gpu_speedup_vs_expert": 0.5},                                     # not correct: not picked
            {"target": "m", "label": "expert", "correct": True, "sim_speedup_vs_expert": 1.0,
             "gpu_speedup_vs_expert": 1.0}]
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "sim_adversary.json").write_text(json.dumps({"rows": rows}))
    monkeypatch.setattr(ap, "ROOT", tmp_path)
    assert worst_climb("m")["label"] == "climb 0 from expert"
    assert worst_climb("other") is None
