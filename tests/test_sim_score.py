"""bench/sim_score.py's scoring (issue 39): a row's speedup over its group's reference, sim against GPU,
the rms and worst error, and the wrong signs (the sim reads a row faster where the GPU ran it slower,
or the reverse), which are the errors a policy trained on the sim would learn. The plans and the GPU
rows are the bench's; here the scorer's arithmetic, on rows whose answers are known."""
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sim_score = pytest.importorskip("sim_score")


def row(group, label, predicted, measured, **kw):
    return {"group": group, "label": label, "predicted_us": predicted, "measured": {"median_us": measured}, **kw}


def test_ratio_scores_measure_speedups_over_the_reference_and_flag_wrong_signs():
    rows = [row("a", "ref", 100.0, 100.0), row("a", "agrees", 90.0, 90.0),
            row("a", "wrong", 90.0, 110.0),                       # sim: 1.11x faster, GPU: 0.91x
            row("a", "near", 100.5, 99.6),                        # both within 1%: a near-tie, not a sign
            row("b", "ref", 50.0, 60.0), row("b", "slow both", 60.0, 70.0),
            row("b", "left out", 1.0, 1.0, skip=["maxnreg"])]
    s = sim_score.ratio_scores(rows, lambda rs: rs[0])
    a = s["groups"]["a"]
    assert [p["label"] for p in a["rows"]] == ["agrees", "wrong", "near"]
    assert a["rows"][0]["err"] == 0
    assert a["rows"][1]["sim"] == round(100 / 90, 4) and a["rows"][1]["gpu"] == round(100 / 110, 4)
    assert a["worst"] == pytest.approx(110 / 90 - 1, abs=1e-4)
    assert [w["label"] for w in s["wrong_sign"]] == ["wrong"]
    assert s["rows"] == 4                                      # the skipped row is not scored
    errs = [p["err"] for g in s["groups"].values() for p in g["rows"]]
    assert s["rms"] == pytest.approx(math.sqrt(sum(e * e for e in errs) / len(errs)), abs=1e-4)
    assert s["groups"]["b"]["spearman"] is None               # two points: no rank score


def test_a_slower_row_the_sim_reads_faster_is_the_wrong_sign_whichever_way():
    rows = [row("g", "ref", 100.0, 100.0), row("g", "sim slower, gpu faster", 105.0, 95.0)]
    s = sim_score.ratio_scores(rows, lambda rs: rs[0])
    assert len(s["wrong_sign"]) == 1


def test_the_plan_cache_is_keyed_by_the_lowering_not_the_cost_model():
    """A change to the cost model reuses the cached plans; the key names the row and the lowering."""
    digest = sim_score.lowering_digest()
    assert digest == sim_score.lowering_digest()
    b1 = ("row", {"target": "llama-1b", "label": "expert", "start": "", "edits_from_start": []}, 132, (), "mid", "")
    b2 = ("row", {"target": "llama-1b", "label": "expert", "start": "", "edits_from_start": ["x"]}, 132, (), "mid", "")
    assert sim_score._cache_key(b1, digest) != sim_score._cache_key(b2, digest)
    assert sim_score._cache_key(b1, digest) != sim_score._cache_key(b1, "other")
    assert sim_score._cache_key(b1, digest) != sim_score._cache_key(b1[:-1] + ("2026-12-02T03:00",), digest)   # another expert
    assert sim_score._cache_key(b1, digest) == sim_score._cache_key(b1[:4] + ("seed", ""), digest)      # positions: priced
    assert all(name in sim_score.MODEL_FILES for name in ("costmodel.py", "devices.py"))


def test_ab_and_probe_rows_take_the_kernel_as_it_is_and_leave_out_knobs_the_sim_cannot_price(tmp_path, monkeypatch):
    import json
    cmd = ("python bench/ab_knobs.py --model mk_qwen3_0p6b --extra v8=bench/variants/qwen3_expert_tile_v8.txt "
           "add32=bench/schedules/s49_expert_add32.edits")
    rows = [{"schedule": "expert", "knobs": {}, "median_us": 776.0},
            {"schedule": "expert", "knobs": {"distinct_ops": "layers\\.0\\."}, "median_us": 803.0},
            {"schedule": "v8", "knobs": {"maxnreg": 184}, "median_us": 790.0},
            {"schedule": "add32", "knobs": {}, "median_us": 777.0}]
    for name, date in (("ab_knobs_new.json", sim_score.ALIGNED + ":30"), ("ab_knobs_old.json", "2026-11-29T10:00:00")):
        (tmp_path / name).write_text(json.dumps({"device": "NVIDIA H200", "date": date, "command": cmd, "rows": rows}))
    probe = {"device": "NVIDIA H200", "date": sim_score.ALIGNED + ":31", "command": "python bench/task_probe.py --model llama-1b",
             "rows": [{"schedule": "expert", "megakernel": {"median_us": 785.0}},
                      {"schedule": "expert", "no_deps": True, "megakernel": {"median_us": 700.0}}]}
    (tmp_path / "task_probe_x.json").write_text(json.dumps(probe))
    monkeypatch.setattr(sim_score, "RESULTS", tmp_path)
    ab = sim_score.ab_rows(sim_score.ALIGNED)
    assert [r["group"] for r in ab] == ["ab_knobs_new.json"] * 4          # the file before the fix is left out
    assert [r["skip"] for r in ab] == [[], [], ["maxnreg"], []]           # distinct_ops is priced, maxnreg not
    assert ab[2]["build"] == ("ab", "mk_qwen3_0p6b", "v8", "bench/variants/qwen3_expert_tile_v8.txt", "")
    # an --extra file under bench/schedules is found too (the reader knew bench/variants alone: KeyError)
    assert ab[3]["build"] == ("ab", "mk_qwen3_0p6b", "add32", "bench/schedules/s49_expert_add32.edits", "")
    assert len(sim_score.ab_rows("2026-11-29")) == 8
    # a schedule its command names no file for is a clear error, not a KeyError in a pool worker
    doc = json.loads((tmp_path / "ab_knobs_new.json").read_text())
    doc["rows"].append({"schedule": "mystery", "knobs": {}, "median_us": 1.0})
    (tmp_path / "ab_knobs_new.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="mystery.*neither a named schedule"):
        sim_score.ab_rows(sim_score.ALIGNED)
    pr = sim_score.probe_rows(sim_score.ALIGNED)
    assert len(pr) == 1 and pr[0]["target"] == "llama-1b" and pr[0]["measured"] == {"median_us": 785.0}


def test_variants_replace_named_constants_and_a_plan_priced_under_several_gives_each_its_own_price():
    """--variant NAME:FIELD=VALUE: the shipped constants with those fields replaced; a field the spec lacks,
    a value that is no number or a repeated name is refused by name. One plan priced under the shipped
    constants and then a variant gives the variant what a fresh plan does (its cached lowering holds
    nothing of the constants), so one pass scores a whole grid."""
    import pickle

    from megakernel_gym.compiler.costmodel import DEVICES, predict

    specs = sim_score.variant_specs("H200", ["light:norm_task_us=0,small_task_us=0.1"])
    assert list(specs) == ["shipped", "light"] and specs["shipped"] == DEVICES["H200"]
    assert specs["light"].norm_task_us == 0.0 and specs["light"].small_task_us == 0.1
    assert specs["light"].staged_us == DEVICES["H200"].staged_us
    for bad, why in (("x:nope=1", "not a DeviceSpec field"), ("x:norm_task_us=fast", "not a number"),
                     ("shipped:norm_task_us=1", "new NAME"), ("x", "NAME:FIELD=VALUE")):
        with pytest.raises(SystemExit, match=why):
            sim_score.variant_specs("H200", [bad])
    from sim_adversary import target_ir
    _, ir = target_ir("llama-tiny", 8)
    plan = ir.plan()
    blob = pickle.dumps(plan)
    first = predict(plan, specs["shipped"]).latency_us
    after = predict(plan, specs["light"]).latency_us
    fresh = predict(pickle.loads(blob), specs["light"]).latency_us
    assert after == fresh and after < first


def test_the_dump_keeps_every_rows_price_under_each_set_and_rescores_as_the_run_did(tmp_path):
    """--dump PATH: a grid taken apart row by row afterwards. Each row keeps its name, GPU time and its
    prediction under every set of constants, not its plan file; rescored from the dump, a set's ratios
    are the run's."""
    import json
    specs = sim_score.variant_specs("H200", ["quiet:idle_ring=1"])
    rows = [row("g", "start", 100.0, 100.0, predicted_by={"shipped": 100.0, "quiet": 90.0}, plan_file=tmp_path / "a.pkl",
                build=("row", {}, 132, (), "mid", "")),
            row("g", "x", 95.0, 104.0, predicted_by={"shipped": 95.0, "quiet": 91.0}, plan_file=tmp_path / "b.pkl",
                build=("row", {}, 132, (), "mid", ""))]
    sim_score.write_dump(tmp_path / "d.json", specs, {"bisect": rows})
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["variants"] == {"shipped": {}, "quiet": {"idle_ring": 1.0}}
    assert [set(r) for r in d["rows"]["bisect"]] == [{"group", "label", "measured", "predicted_by"}] * 2
    for v in ("shipped", "quiet"):
        again = [dict(r, predicted_us=r["predicted_by"][v]) for r in d["rows"]["bisect"]]
        ran = [dict(r, predicted_us=r["predicted_by"][v]) for r in rows]
        ref = lambda rs: rs[0]  # noqa: E731
        assert sim_score.ratio_scores(again, ref) == sim_score.ratio_scores(ran, ref)
    # the GPU ran x slower than the start: the shipped set reads it faster (a wrong sign), the other slower
    shipped, quiet = (sim_score.ratio_scores([dict(r, predicted_us=r["predicted_by"][v]) for r in d["rows"]["bisect"]],
                                             lambda rs: rs[0])["wrong_sign"] for v in ("shipped", "quiet"))
    assert [w["label"] for w in shipped] == ["x"] and quiet == []


def test_a_row_is_priced_with_the_expert_it_was_timed_with():
    """A lever that joins the expert changes what "expert" names: a row timed before it (an A/B file's
    expert, a climb from the expert) is rebuilt without it, a row timed since with it."""
    from megakernel_gym.policies.expert import LEVER_SINCE, LEVERS, levers_as_of
    assert levers_as_of(None) == LEVERS and "spread" in LEVERS
    since = LEVER_SINCE["spread"]                     # GPT-2's lm_head beside its old expert was timed before it
    assert "spread" not in levers_as_of("2026-12-02T02:51:50") and "spread" in levers_as_of("2026-12-02T03:10:37")
    assert sim_score._epoch("2026-11-30T10:00:00") == "" and sim_score._epoch("2026-12-02T03:10:37") == since
    assert sim_score._epoch("2026-12-02T02:51:50") == "" and sim_score._epoch("2027-01-01T00:00:00") == since
