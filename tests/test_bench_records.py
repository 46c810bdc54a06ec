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
