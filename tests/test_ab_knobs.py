"""bench/ab_knobs.py's rounds on the CPU, with the GPU parts stood in for (the build, its launch and
the timer): every build of every schedule is timed once per round, in an order rotated by one each
round, so that schedules compare as fairly as a schedule's knob sets; each row's ratios are to its
schedule's defaults and to the first schedule's; a build whose output differs is marked."""
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path, monkeypatch, graphs, speed: dict, argv: list[str]):
    """ab_knobs.main() with `argv`, each (schedule, knobs) build timed at speed[...] us plus a drift;
    the schedules are "expert" and then "x". Returns the builds in the order they were timed and
    the result's document."""
    sys.path.insert(0, str(ROOT / "bench"))
    import ab_knobs

    from megakernel_gym.ir_exposure import make_ir
    g = graphs["llama-tiny"]
    step = SimpleNamespace(base=make_ir(g, num_sms=8), params={}, feeds={}, graph=g, truth=torch.ones(4),
                           floor_us=50.0, bw=3000.0)
    current, order = {}, []   # the schedule being built; (schedule, knobs) in the order they were timed

    class FakeMegakernel:   # a build: its launch computes other bits under a knob set
        def __init__(self, plan, impls=None, **knobs):
            self.sched, self.key = current["sched"], ",".join(f"{k}={v}" for k, v in knobs.items())
            self.table = SimpleNamespace(threads=288, ws_stages=5)

        def bind(self, params, feeds):
            return FakeLaunch(self.sched, self.key)

    class FakeLaunch:
        def __init__(self, sched, key):
            self.sched, self.key = sched, key

        def __call__(self):
            pass

        def check(self):
            pass

        def outputs(self):
            return {g.outputs[0]: torch.ones(4) if self.key == "" else torch.full((4,), 2.0)}

    def apply(base, text):
        current["sched"] = "x" if current else "expert"
        return real_apply(base, text)

    def timed(launch, iters):
        order.append((launch.sched, launch.key))
        t = speed[(launch.sched, launch.key)] + len(order) * 0.001   # drift over the run
        return {"median_us": t, "p10_us": t, "p90_us": t}

    real_apply = ab_knobs.apply_edits
    monkeypatch.setattr(ab_knobs, "apply_edits", apply)
    monkeypatch.setattr(ab_knobs, "load_step", lambda name: step)
    monkeypatch.setattr(ab_knobs, "Megakernel", FakeMegakernel)
    monkeypatch.setattr(ab_knobs, "named_edits", lambda base, name: "")
    monkeypatch.setattr(ab_knobs, "schedule_file", lambda base, path: "")
    monkeypatch.setattr(ab_knobs, "rel_err", lambda a, b: 0.01)
    monkeypatch.setattr(ab_knobs, "time_us", timed)
    monkeypatch.setattr(sys, "argv", ["ab_knobs.py", *argv, "--out", str(tmp_path), "--tag", "_t"])
    ab_knobs.main()
    return order, json.loads((tmp_path / "ab_knobs_t.json").read_text())


def test_every_build_of_every_schedule_alternates_and_rows_carry_both_ratios(tmp_path, monkeypatch, graphs):
    speed = {("expert", ""): 100.0, ("expert", "inflight=1"): 90.0, ("x", ""): 120.0, ("x", "inflight=1"): 110.0}
    order, doc = _run(tmp_path, monkeypatch, graphs, speed,
                      ["inflight=1", "--extra", "x=whatever.edits", "--rounds", "4"])
    builds = [("expert", ""), ("expert", "inflight=1"), ("x", ""), ("x", "inflight=1")]
    assert order == [builds[(r + i) % 4] for r in range(4) for i in range(4)]   # all four, rotated each round
    rows = {(r["schedule"], ",".join(f"{k}={v}" for k, v in r["knobs"].items())): r for r in doc["rows"]}
    assert set(rows) == set(builds)
    for (sched, key), r in rows.items():
        assert len(r["round_medians_us"]) == 4 and abs(r["median_us"] - speed[(sched, key)]) < 0.02
        assert abs(r["speedup_vs_defaults"] - speed[(sched, "")] / speed[(sched, key)]) < 1e-3
        assert abs(r["speedup_vs_first"] - speed[("expert", "")] / speed[(sched, key)]) < 1e-3
        assert r["same_bits_as_defaults"] is (key == "")
    assert doc["targets"][0]["met"] is False   # a build computed other bits


def test_a_knob_set_named_for_a_schedule_is_built_for_it_alone(tmp_path, monkeypatch, graphs):
    """x:claim=... is x's build only (a knob the expert's plan would refuse); a value holding a colon
    (inflight_ops=attn:1) is still a knob set for every schedule."""
    speed = {("expert", ""): 100.0, ("x", ""): 110.0, ("x", "claim=^lm_head$"): 105.0,
             ("expert", "inflight_ops=attn:1"): 99.0, ("x", "inflight_ops=attn:1"): 109.0}
    order, doc = _run(tmp_path, monkeypatch, graphs, speed,
                      ["x:claim=^lm_head$", "inflight_ops=attn:1", "--extra", "x=whatever.edits", "--rounds", "1"])
    assert sorted(order) == sorted(speed)
    rows = {(r["schedule"], ",".join(f"{k}={v}" for k, v in r["knobs"].items())) for r in doc["rows"]}
    assert rows == set(speed)


def test_a_knob_set_for_a_schedule_that_is_not_there_is_refused(tmp_path, monkeypatch, graphs):
    with pytest.raises(SystemExit, match="'nope': no such schedule"):
        _run(tmp_path, monkeypatch, graphs, {}, ["nope:inflight=1"])
