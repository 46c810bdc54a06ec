"""The SQLite results store: WAL, cache hits, and nothing lost when a judge dies mid-evaluation."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.rewards import Candidate, EvalResult, Judge, ResultsStore


def _res(i, status="correct"):
    return EvalResult(status=status, reason=str(i), problem="p", backend="cpu", candidate_sha256=f"c{i}",
                      problem_sha256="p0")


def test_wal_put_get_and_cacheable_statuses(tmp_path):
    s = ResultsStore(tmp_path / "r.sqlite")
    assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.put(_res(1), "cpu:cpu")
    s.put(_res(2, "timeout"), "cpu:cpu")
    hit = s.get("p0", "c1", "cpu:cpu", "")
    assert hit is not None and hit.cached and hit.reason == "1"
    assert s.get("p0", "c2", "cpu:cpu", "") is None        # a timeout may be the machine's fault: not served
    assert s.get("p0", "c1", "gpu:NVIDIA H200", "") is None  # keyed by device
    assert s.get("p0", "c1", "cpu:cpu", "v2") is None        # and by the judge that made it
    assert s.count() == 2
    s.put_baselines("p0", "gpu:x", "torch 2", {"eager": {"median_ms": 1.0}})
    assert s.get_baselines("p0", "gpu:x", "torch 2") == {"eager": {"median_ms": 1.0}}


def test_judge_serves_cache(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    with Judge("cpu", store=store) as j:
        ref = reference_candidates("rmsnorm")["triton"]
        first = j.evaluate(get_problem("rmsnorm"), ref)
        t0 = time.perf_counter()
        second = j.evaluate(get_problem("rmsnorm"), ref)
        assert first.status == second.status == "correct"
        assert not first.cached and second.cached
        assert time.perf_counter() - t0 < 0.5
    assert store.count() == 1


def test_a_timed_result_is_served_only_under_the_software_it_was_timed_with(tmp_path):
    """A cached speedup is over the baselines of its day: torch's and the production libraries' (issue 43). One
    timed under other software is judged again; one timed under this software is served."""
    store = ResultsStore(tmp_path / "r.sqlite")
    problem, ref = get_problem("rmsnorm"), reference_candidates("rmsnorm")["triton"]
    with Judge("cpu", store=store) as j:
        key, software = j._device_key(), j._store_key()[1]
        timed = dict(status="correct", reason="old", problem="rmsnorm", backend="gpu", candidate_sha256=ref.sha256,
                     problem_sha256=problem.sha256, speedup=6.0, judge_version=j.version)
        store.put(EvalResult(**timed, timing={"median_ms": 1.0, "software": "torch 0.0"}), key)
        again = j.evaluate(problem, ref)
        assert not again.cached and again.reason != "old"
        store.put(EvalResult(**timed, timing={"median_ms": 1.0, "software": software}), key)
        hit = j.evaluate(problem, ref)
        assert hit.cached and hit.reason == "old"


def test_a_verdict_is_served_and_exported_only_under_the_judge_that_made_it(tmp_path):
    """Red team 20: the store keyed verdicts by problem, candidate and device alone, so an older judge's `correct`
    for a kernel a later fix refuses (red team 18's grid-callable softmax) was served by today's judge, paid by the
    env and shipped by export. A verdict carries its judge's identity (a hash of rewards/ and cuda/, and any
    test-only setting); another judge's is neither served nor exported. Honest beside it: the same judge serves its
    own verdict back, and a store written before identities opens, its rows kept and never served."""
    from megakernel_gym.policies.export import ExportError, export_kernels
    from megakernel_gym.rewards.version import judge_version
    db = tmp_path / "r.sqlite"
    old = sqlite3.connect(db)             # a store as judges before this one wrote it (no judge_version column)
    old.executescript("CREATE TABLE evaluations (id INTEGER PRIMARY KEY AUTOINCREMENT, problem TEXT NOT NULL, "
                      "problem_sha256 TEXT NOT NULL, candidate_sha256 TEXT NOT NULL, device TEXT NOT NULL, "
                      "backend TEXT NOT NULL, status TEXT NOT NULL, speedup REAL, result TEXT NOT NULL, "
                      "created REAL NOT NULL);")
    old.close()
    problem = get_problem("rmsnorm")
    cheat = Candidate("import torch\n# stands in for a kernel an older judge passed\n")
    store = ResultsStore(db)
    assert store.count() == 0
    with Judge("cpu", store=store) as j:
        assert j.version == judge_version() and Judge("cpu", store=False, python_guard=False).version.endswith(
            "+no-python-guard")
        stale = EvalResult(status="correct", reason="an older judge", problem="rmsnorm", backend="cpu",
                           candidate_sha256=cheat.sha256, problem_sha256=problem.sha256, judge_version="0ld")
        store.put(stale, j._device_key(), source=cheat.source)
        now = j.evaluate(problem, cheat)
        assert not now.cached and now.status != "correct" and now.judge_version == j.version, now.reason
        try:
            export_kernels(tmp_path / "out", store=store)
            raise AssertionError("the older judge's verdict was exported")
        except ExportError:
            pass
        ref = reference_candidates("rmsnorm")["triton"]
        assert not j.evaluate(problem, ref).cached and j.evaluate(problem, ref).cached
    assert [k["candidate_sha256"] for k in export_kernels(tmp_path / "out", store=store)["kernels"]] == [ref.sha256]
    store.close()


def test_the_judges_identity_names_its_settings_and_the_code_its_references_run():
    """rewards/version.py: the built-in references import compiler/ and curriculum/numerics.py, and a judge's
    recycle policy, privileges, stop rule and time limits change what its verdicts and times mean: each is in
    its identity.
    The baselines and peaks the store files are under it too (red team 21: an older judge's baselines were
    served to a new one, measured by the older reference worker)."""
    from megakernel_gym.rewards import version
    from megakernel_gym.rewards.judge import DEFAULT_TIMING, Judge
    base = version.judge_version()
    assert {"rewards", "cuda", "compiler", "curriculum/numerics.py"} <= set(version.JUDGE_CODE)
    others = [version.judge_version(recycle="never"), version.judge_version(recycle="always"),
              version.judge_version(drop_privileges=False), version.judge_version(timing={"min_iters": 10}),
              version.judge_version(timing={"max_seconds": 9.0})]
    assert len({base, *others}) == 6 and all(v.startswith(base + "+") for v in others), others
    from megakernel_gym.rewards.judge import version_of
    assert version_of("cpu", {"timing": dict(DEFAULT_TIMING)}) == base == version.judge_version(recycle="failure")
    assert version_of("cpu", {"timing": {"min_iters": 10}}) == version.judge_version(
        timing={**DEFAULT_TIMING, "min_iters": 10})
    with Judge("cpu", store=False, recycle="never") as j:
        assert j.version == others[0] and j._store_key()[1].endswith(f" judge {j.version}")
    # red team 22: a correct made under a long --timeout was served to a default judge, which would time it out
    from megakernel_gym.rewards.judge import default_timeout, version_of
    assert version_of("cpu", {}) == base == version_of("cpu", {"timeout_s": default_timeout("cpu")})
    long = version_of("cpu", {"timeout_s": 3000})
    assert long == base + "+timeout-3000s" and version_of("gpu", {"timeout_s": 3000}) == long
    with Judge("cpu", store=False, timeout_s=3000) as j:
        assert j.version == long


def test_killed_judge_loses_nothing_already_written(tmp_path):
    """A judge process SIGKILLed in the middle of an evaluation: every earlier row is there and
    the database passes an integrity check."""
    db = tmp_path / "r.sqlite"
    script = textwrap.dedent(f"""
        import sys
        from megakernel_gym.curriculum import get_problem, reference_candidates
        from megakernel_gym.rewards import Judge, Candidate
        j = Judge("cpu", store={str(db)!r}, use_cache=False)
        p = get_problem("softmax")
        ref = reference_candidates("softmax")["triton"]
        for i in range(3):
            r = j.evaluate(p, Candidate(ref.source + "\\n# variant %d" % i))
            print("done", i, r.status, flush=True)
        hang = "import torch\\nimport torch.nn as nn\\nclass ModelNew(nn.Module):\\n    def forward(self, x):\\n        while True:\\n            pass\\n"
        print("hanging", flush=True)
        j.evaluate(p, Candidate(hang))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith("hanging"):
            time.sleep(2)  # mid-evaluation of the 4th candidate
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert lines[:3] == [f"done {i} correct" for i in range(3)], lines
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*) FROM evaluations WHERE status='correct'").fetchone()[0] == 3
    con.close()
    # and a new judge opens it and keeps going
    with Judge("cpu", store=db) as j:
        r = j.evaluate(get_problem("softmax"), Candidate(reference_candidates("softmax")["triton"].source + "\n# variant 0"))
        assert r.cached and r.status == "correct"


def test_local_pool_matches_single_judge(tmp_path):
    """Two CPU slots evaluating concurrently give the same verdicts as one judge, in input order,
    and every result lands in the shared store."""
    from megakernel_gym.rewards import LocalPool
    from conftest import CORPUS, read_expectation
    names = ["softmax", "rmsnorm", "layernorm", "softmax"]
    items = [(get_problem(n), reference_candidates(n)["triton"]) for n in names]
    bad = read_expectation(CORPUS / "adversarial" / "partial_write.py")
    items.append((get_problem("softmax"), Candidate(bad["source"])))
    with LocalPool("cpu", num_workers=2, store=tmp_path / "pool.sqlite", use_cache=False) as pool:
        assert pool.size == 2
        seen = []
        results = pool.evaluate_many(items, on_result=lambda i, r: seen.append(i))
    assert [r.status for r in results] == ["correct"] * 4 + ["incorrect"], [r.reason for r in results]
    assert [r.problem for r in results] == names + ["softmax"]
    assert sorted(seen) == list(range(5))
    assert ResultsStore(tmp_path / "pool.sqlite").count() == 5
