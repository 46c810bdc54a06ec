"""How the benches turn what ran on a GPU into bench/results rows: a failed baseline is a failure unless
it cannot apply to the problem (kernelbench_suite.sort_baselines), and a GPU test run cut before pytest
wrote its XML still records what ran, with the test it was cut in (gpu_tests_json.rows_from_log)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_an_uncapturable_cuda_graph_is_not_applicable_and_any_other_failure_is_a_failure():
    sort = _bench("kernelbench_suite").sort_baselines
    capture = ("error: RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture unless "
               "the CPU tensor is pinned.")
    row = sort({"baselines_ms": {"eager": 3.2, "cuda_graph": capture, "torch_compile": 2.0}})
    assert row["baselines_failed"] == [] and row["baselines_na"] == ["cuda_graph"]
    oom = "error: OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB."
    row = sort({"baselines_ms": {"eager": 1.1, "cuda_graph": oom, "torch_compile": capture}})
    assert row["baselines_failed"] == ["cuda_graph", "torch_compile"] and "baselines_na" not in row
    assert sort({"baselines_ms": {"eager": 1.0}})["baselines_failed"] == []


def test_a_cut_gpu_test_log_keeps_what_ran_and_names_the_test_it_was_cut_in(tmp_path):
    log = tmp_path / "judge.log"
    log.write_text("============ test session starts ============\n"
                   "tests/test_gpu_judge.py::test_a[softmax] PASSED                 [ 10%]\n"
                   "tests/test_gpu_judge.py::test_ray SKIPPED (no ray)              [ 20%]\n"
                   "tests/test_adversarial.py::test_exploit_gpu[x] FAILED           [ 30%]\n"
                   "tests/test_adversarial.py::test_exploit_gpu[raw_tail_thread] \n")
    rows = _bench("gpu_tests_json").rows_from_log(log)
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("tests.test_gpu_judge::test_a[softmax]", "passed"), ("tests.test_gpu_judge::test_ray", "skipped"),
        ("tests.test_adversarial::test_exploit_gpu[x]", "failed"),
        ("tests.test_adversarial::test_exploit_gpu[raw_tail_thread]", "unfinished")]


def test_a_gpu_test_run_cut_by_an_interrupt_counts_no_test_that_did_not_run(tmp_path):
    """pytest interrupted (timeout -s INT) still writes its JUnit XML, with an empty testcase (no class, no name):
    it is no test, and not a pass."""
    xml = tmp_path / "mk.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="2">'
                   '<testcase classname="tests.test_hops" name="test_a" time="1.5"/>'
                   '<testcase classname="tests.test_hops" name="test_b" time="0.2"><failure message="x"/></testcase>'
                   '<testcase time="0.001"/></testsuite></testsuites>')
    rows = _bench("gpu_tests_json").rows_from_junit(xml)
    assert [(r["test"], r["outcome"]) for r in rows] == [("tests.test_hops::test_a", "passed"),
                                                         ("tests.test_hops::test_b", "failed")]


def test_policy_runs_split_over_gpus_merge_into_one_record(tmp_path, monkeypatch):
    """policies_gpu --merge: each GPU measured some problems (--only); the merged record's geomean is over
    the held-out family problems of both, a schedule that failed anywhere misses the correctness target,
    and the device, date and commands are the runs', not this machine's."""
    import json
    pol = _bench("policies_gpu")

    def run(name, problems, date, ok=True):
        rows = [{"problem": p, "policy": "lm", "correct": ok, "speedup_over_default": s} for p, s in problems]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"device": "NVIDIA H200", "date": date, "command": f"python {name}", "rows": rows}))
        return path

    a = run("a", [("mk_qwen3_0p6b", 1.6), ("mk_qwen3_1p7b", 1.4), ("mk_attention_block", 0.5)], "2026-11-30T10:00:00")
    b = run("b", [("mk_mistral_window", 1.25), ("mk_mistral_window_batch2", 1.45)], "2026-11-30T10:05:00")
    monkeypatch.setattr(sys, "argv", ["policies_gpu.py", "--merge", str(a), str(b), "--out", str(tmp_path / "out")])
    pol.main()
    doc = json.loads((tmp_path / "out" / "policies_gpu.json").read_text())
    geo, correct = doc["targets"]
    assert abs(geo["measured"] - (1.6 * 1.4 * 1.25 * 1.45) ** 0.25) < 1e-4 and geo["met"]   # the block is not a family
    assert correct == {"target": correct["target"], "measured": "5/5", "met": True}
    assert doc["device"] == "NVIDIA H200" and doc["date"] == "2026-11-30T10:05:00"
    assert doc["command"] == "python a ; python b" and len(doc["rows"]) == 5
    c = run("c", [("mk_mistral_window", 1.3)], "2026-11-30T11:00:00", ok=False)
    monkeypatch.setattr(sys, "argv", ["policies_gpu.py", "--merge", str(a), str(c), "--out", str(tmp_path / "o2")])
    pol.main()
    doc = json.loads((tmp_path / "o2" / "policies_gpu.json").read_text())
    assert doc["targets"][1]["met"] is False and doc["targets"][0]["measured"] is None
