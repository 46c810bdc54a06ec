"""bench/sim_bisect.py: an adversary's schedule taken apart by edit verb, each piece a schedule the
edit language takes, and each piece's sim and GPU time read over its start's."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from sim_bisect import after_prefix, picked_rows, summarize, variants  # noqa: E402


def test_a_climb_comes_apart_into_its_start_the_whole_and_each_verb_without_and_alone():
    row = {"target": "llama-tiny", "label": "climb 0 from default", "start": "default",
           "edits_from_start": ["tile layers.*.mlp.gate_proj n=16", "assign layers.*.attn.q_proj sms=0-3",
                                "assign layers.0.mlp.down_proj sms=4-7", "tile layers.*.mlp.gate_proj n=nope"]}
    got = variants("llama-tiny", 8, row)
    labels = [label.rsplit(": ", 1)[1] for label, *_ in got]
    # the whole climb as one script holds a refused edit, so it is left out, and so are "without assign"
    # and "only tile", which keep it; "without tile" is "only assign" again, measured once
    assert labels == ["start", "only assign"]
    texts = [ir.text for _, _, ir, _, _ in got]
    assert len(set(texts)) == len(texts)                                  # no schedule twice
    for label, text, ir, start, edits in got:
        assert start == "default" and all(e.split()[0] in ("tile", "assign") for e in edits)
    assert [e.split()[0] for e in got[1][4]] == ["assign", "assign"]


def test_pairs_put_one_verbs_edits_beside_each_other_verbs_alone():
    """--with VERB: the start with only VERB's edits and one other verb's, in the climb's order; a verb the
    climb lacks is refused by name."""
    row = {"target": "llama-tiny", "label": "climb 1 from default", "start": "default",
           "edits_from_start": ["assign layers.*.attn.q_proj sms=0-3", "ahead layers.*.mlp.gate_proj n=1",
                                "tile layers.*.mlp.down_proj n=2", "assign layers.0.mlp.down_proj sms=4-7",
                                "inflight layers.*.mlp.down_proj n=1"]}
    e = row["edits_from_start"]
    got = {label.rsplit(": ", 1)[1]: edits for label, _, _, _, edits in variants("llama-tiny", 8, row, ("ahead",))}
    assert got["only assign and ahead"] == e[:2] + e[3:4]
    assert got["only tile and ahead"] == e[1:3] and got["only inflight and ahead"] == [e[1], e[4]]
    assert "only ahead and ahead" not in got
    with pytest.raises(SystemExit, match="no 'split' edit"):
        variants("llama-tiny", 8, row, ("split",))


def test_after_an_earlier_row_only_the_edits_past_it_come_apart():
    """--after LABEL: the earlier row of the same climb is the start; each variant keeps its edits and
    counts its own from the default (so sim_score rebuilds it from the row); a row whose edits do not
    begin the picked one's, or a label no row has, is refused by name."""
    e = ["assign layers.*.attn.q_proj sms=0-3", "tile layers.*.mlp.gate_proj n=16",
         "assign layers.0.mlp.down_proj sms=4-7", "tile layers.*.mlp.down_proj n=2"]
    whole = {"target": "llama-tiny", "label": "climb 0 from default", "start": "default", "edits_from_start": e}
    third = {"target": "llama-tiny", "label": "climb 0 from default after 33%", "start": "default",
             "edits_from_start": e[:2]}
    doc = {"rows": [third, whole]}
    prefix = after_prefix(doc, whole, third["label"])
    assert prefix == tuple(e[:2])
    got = {label.rsplit(": ", 1)[1]: (label, edits) for label, _, _, _, edits in variants("llama-tiny", 8, whole, (), prefix)}
    assert got["start"] == ("climb 0 from default (llama-tiny) after its first 2 edits: start", e[:2])
    assert got["whole"][1] == e
    assert got["only assign"][1] == e[:3] and got["without assign"][1] == e[:2] + e[3:]
    assert "only tile" not in got   # the same schedule as "without assign", measured once
    other = dict(third, edits_from_start=[e[1], e[0]])
    with pytest.raises(SystemExit, match="do not begin"):
        after_prefix({"rows": [other, whole]}, whole, third["label"])
    with pytest.raises(SystemExit, match="no row of llama-tiny"):
        after_prefix(doc, whole, "climb 9")
    assert after_prefix(doc, whole, None) == ()


def test_ratios_are_over_each_climbs_own_start_and_the_worst_rows_are_picked():
    rows = [{"label": "c (m): start", "predicted_us": 100.0, "measured": {"median_us": 200.0}},
            {"label": "c (m): whole", "predicted_us": 90.0, "measured": {"median_us": 240.0}},
            {"label": "d (m): start", "predicted_us": 50.0, "measured": {"median_us": 50.0}},
            {"label": "d (m): only tile", "predicted_us": 50.0}]
    summarize(rows)
    assert rows[1]["sim_vs_start"] == 0.9 and rows[1]["gpu_vs_start"] == 1.2
    assert rows[1]["gpu_over_sim"] == round(1.2 / 0.9, 4)
    assert "gpu_vs_start" not in rows[3] and rows[3]["sim_vs_start"] == 1.0
    doc = {"rows": [{"target": "m", "label": "expert", "sim_over_gpu": 1.0},
                    {"target": "m", "label": "a", "start": "expert", "edits_from_start": ["x"], "sim_over_gpu": 1.3},
                    {"target": "m", "label": "b", "start": "default", "edits_from_start": ["x"], "sim_over_gpu": 1.1},
                    {"target": "m", "label": "s", "start": "sampled", "edits_from_start": [], "sim_over_gpu": 2.0}]}
    assert [r["label"] for r in picked_rows(doc, [], 2)] == ["a", "b"]
    assert [r["label"] for r in picked_rows(doc, ["m=b"], 9)] == ["b"]


def test_merged_runs_keep_the_last_run_of_a_target_and_say_which_were_rescored(tmp_path):
    """sim_adversary --merge: a target measured by two runs keeps the later one's rows, and a run whose
    rows were predicted again after it (--rescore) is named in the merged file's `rescored`."""
    import json

    from sim_adversary import merge

    def run(target: str, expert_us: float, date: str, rescored: bool) -> dict:
        rows = [{"target": target, "label": label, "start": start, "predicted_us": p, "correct": True,
                 "measured": {"median_us": m}}
                for label, start, p, m in (("default", "", 120.0, 130.0), ("expert", "", expert_us, 100.0),
                                           ("climb 0 from default", "default", 110.0, 125.0))]
        doc = {"device": "GPU", "sim_device": "H200", "date": date, "command": f"run {target}", "rows": rows,
               "num_sms": 132, "climbs": {target: []}}
        if rescored:
            doc["rescored"] = {"date": date, "note": "predicted again"}
        return doc

    paths = []
    for i, doc in enumerate((run("a", 100.0, "d1", True), run("b", 90.0, "d2", False), run("a", 95.0, "d3", False))):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(doc))
    merge(paths, tmp_path / "out")
    out = json.loads((tmp_path / "out" / "sim_adversary.json").read_text())
    assert [r["target"] for r in out["rows"]] == ["a"] * 3 + ["b"] * 3
    assert [r["predicted_us"] for r in out["rows"] if r["label"] == "expert"] == [95.0, 90.0]   # a's last run
    assert list(out["rescored"]) == ["run 1"] and out["date"] == "d3"
    assert {t["target"].split(":")[0] for t in out["targets"]} == {"all targets", "a", "b"}


def test_refit_names_a_constant_it_cannot_fit(tmp_path):
    """sim_adversary --refit --fields: a name that is not a fitted constant ends before any plan is
    rebuilt, with the names it can fit."""
    from sim_adversary import refit
    with pytest.raises(SystemExit, match=r"\['wait_us'\] are not fitted constants; choose from hbm_gbs"):
        refit(tmp_path / "missing.json", tmp_path, 1, ("wait_latency_us", "wait_us"))


def test_a_run_times_the_step_where_the_sim_prices_it_and_runs_at_other_positions_do_not_merge(tmp_path):
    """sim_adversary times each step at the middle of its cache (pos = max_seq // 2, so pos + 1 is the
    mean of the judge's uniform draw, the sim's expectation) or at seed 0's draw (what runs before
    2026-11-29 timed: 527 of SmolLM2's 2,048); files timed at different positions are not one file."""
    import json

    from sim_adversary import merge, step_positions

    from megakernel_gym.compiler.zoo import ZOO
    tiny = ZOO["llama-tiny"].args[0]
    assert step_positions("llama-tiny", "mid") == [tiny.max_seq // 2] * tiny.batch
    assert step_positions("llama-1b", "seed") == [527]          # seed 0's draw, as the zoo's factory draws it
    assert step_positions("mk_gpt2_large_batch2", "seed") == [493, 584]
    assert step_positions("mk_gpt2_large_batch2", "mid") == [512, 512]
    with pytest.raises(ValueError, match="one of mid, seed"):
        step_positions("llama-1b", "end")
    docs = [{"device": "GPU", "sim_device": "H200", "date": "d", "command": "c", "num_sms": 132, "climbs": {},
             "rows": [{"target": t, "label": "expert", "predicted_us": 1.0, "measured": {"median_us": 1.0}}],
             **({"positions": "mid"} if t == "b" else {})} for t in ("a", "b")]
    paths = []
    for i, d in enumerate(docs):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(d))
    with pytest.raises(SystemExit, match="positions"):
        merge(paths, tmp_path / "out")


def test_bisect_runs_merge_into_one_file_that_names_each_rows_run(tmp_path):
    """sim_bisect --merge: two GPU calls' bisects become one sim_bisect.json whose rows say which run
    timed them; runs on different devices do not merge."""
    import json

    from sim_bisect import merge

    def run(device: str, date: str, labels: list[str]) -> dict:
        return {"device": device, "date": date, "command": f"bisect {date}", "wall_s": 1.0, "notes": "n",
                "targets": [{"target": "every variant correct on the GPU", "measured": "1/1", "met": True}],
                "rows": [{"label": lb, "predicted_us": 1.0} for lb in labels]}

    paths = []
    for i, doc in enumerate((dict(run("H200", "d1", ["a: start", "a: whole"]), adversary_date="a1"),
                             run("H200", "d2", ["b: start"]))):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(doc))
    merge(paths, tmp_path / "out")
    out = json.loads((tmp_path / "out" / "sim_bisect.json").read_text())
    assert [(r["label"], r["run"]) for r in out["rows"]] == [("a: start", 1), ("a: whole", 1), ("b: start", 2)]
    assert out["date"] == "d2" and [t["run"] for t in out["targets"]] == [1, 2]
    assert [r["command"] for r in out["runs"]] == ["bisect d1", "bisect d2"] and "wall_s" not in out
    assert [r["adversary_date"] for r in out["runs"]] == ["a1", None]
    # a merged file merges again as its runs, numbered on: a third run's rows come after them as run 3
    later = tmp_path / "run3.json"
    later.write_text(json.dumps(dict(run("H200", "d4", ["c: start"]), adversary_date="a3")))
    merge([tmp_path / "out" / "sim_bisect.json", later], tmp_path / "again")
    again = json.loads((tmp_path / "again" / "sim_bisect.json").read_text())
    assert [(r["label"], r["run"]) for r in again["rows"]] == [("a: start", 1), ("a: whole", 1), ("b: start", 2),
                                                               ("c: start", 3)]
    assert [r["command"] for r in again["runs"]] == ["bisect d1", "bisect d2", "bisect d4"]
    assert [r["adversary_date"] for r in again["runs"]] == ["a1", None, "a3"] and again["date"] == "d4"
    assert [t["run"] for t in again["targets"]] == [1, 2, 3]
    paths[1].write_text(json.dumps(run("H100", "d3", ["c: start"])))
    with pytest.raises(SystemExit, match="different devices"):
        merge(paths, tmp_path / "out2")


def test_an_adversary_file_gives_back_its_climbs_to_measure_again():
    """sim_adversary --searched FILE.json (a GPU run's file): each climb's best and its snapshots come back
    from the rows by label, as --save-search wrote them, so the same schedules are measured again (the
    default, the expert and known moves are rebuilt anyway)."""
    from sim_adversary import climbs_of_run
    doc = {"date": "d", "search": "s", "num_sms": 132, "sim_device": "H200", "rows": [
        {"target": "m", "label": "default", "edits_from_start": []},
        {"target": "m", "label": "known: siblings", "edits_from_start": ["a"]},
        {"target": "m", "label": "climb 4 from default after 10%", "edits_from_start": ["x"]},
        {"target": "m", "label": "climb 4 from default", "edits_from_start": ["x", "y"]},
        {"target": "m", "label": "climb 0 from expert", "edits_from_start": ["z"]},
        {"target": "n", "label": "climb 1 from expert", "edits_from_start": ["w"]}]}
    out = climbs_of_run(doc, "f.json")
    assert out["num_sms"] == 132 and out["device"] == "H200" and "f.json" in out["note"]
    assert [(c["climb"], c["start"], c["path"], c["counts"]["snapshots"]) for c in out["climbs"]["m"]] == [
        (0, "expert", ["z"], []), (4, "default", ["x", "y"], [[0.1, ["x"], None]])]
    assert [c["path"] for c in out["climbs"]["n"]] == [["w"]]


def test_a_saved_run_is_written_once_with_its_search_and_a_partial_one_names_what_is_left(tmp_path):
    """sim_adversary.save: one sim_adversary.json with the rows, the targets over them, the search's fields
    and wall_s; a save before the last target names the targets not measured yet."""
    import json
    import time

    from sim_adversary import save

    rows = [{"target": "a", "label": label, "start": start, "predicted_us": p, "correct": True, "measured": {"median_us": m}}
            for label, start, p, m in (("default", "", 120.0, 130.0), ("expert", "", 100.0, 100.0),
                                       ("climb 0 from default", "default", 110.0, 125.0))]
    doc = {"num_sms": 132, "search": "the search's note", "climbs": {"a": [], "b": []}}
    save(rows, {"a": [], "b": []}, "H200", "searched", doc, tmp_path, time.perf_counter(), final=False)
    out = json.loads((tmp_path / "sim_adversary.json").read_text())
    assert out["name"] == "sim_adversary" and out["search"] == "the search's note" and out["wall_s"] >= 0
    assert out["rows"][2]["gpu_speedup_vs_expert"] == 0.8 and "PARTIAL: not measured yet: b" in out["notes"]
    # the climb reads 0.909x the expert and ran 0.8x: 13.6% off, past the 5%; ranked right; correct
    assert [t["met"] for t in out["targets"]] == [False, True, True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_adversary.json"]
