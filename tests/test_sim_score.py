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
    b1 = ("row", {"target": "llama-1b", "label": "expert", "start": "", "edits_from_start": []}, 132, (), "mid")
    b2 = ("row", {"target": "llama-1b", "label": "expert", "start": "", "edits_from_start": ["x"]}, 132, (), "mid")
    assert sim_score._cache_key(b1, digest) != sim_score._cache_key(b2, digest)
    assert sim_score._cache_key(b1, digest) != sim_score._cache_key(b1, "other")
    assert all(name in sim_score.MODEL_FILES for name in ("costmodel.py", "devices.py"))
