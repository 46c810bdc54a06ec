"""The Ray pool on a local Ray instance on the CPU: the local pool's verdicts, an actor killed
mid-evaluation retried on another, retries running out as a categorized failure, results in the
store as they arrive, clear errors for a bad cluster; and the HTTP reward service in front of it."""
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("fastapi")

from conftest import CORPUS, read_expectation  # noqa: E402
from megakernel_gym.curriculum import get_problem, reference_candidates  # noqa: E402
from megakernel_gym.rewards import Candidate, LocalPool, RayPool, RayPoolError  # noqa: E402
from megakernel_gym.rewards.ray_pool import _probe  # noqa: E402
from megakernel_gym.rewards.serve import (RewardClient, RewardServiceError, make_app, make_reward_fn,  # noqa: E402
                                          serve_in_thread)

# A correct kernel whose import spins for a few seconds (about 0.6 us an iteration under the guard): long
# enough to kill its actor mid-run.
SLOW = reference_candidates("softmax")["triton"].source + "\n_spin = 0\nfor _k in range(8_000_000):\n    _spin += 1\n"


def _corpus(name: str) -> Candidate:
    return Candidate(read_expectation(CORPUS / "adversarial" / f"{name}.py")["source"])


def _mix():
    sm, rms = get_problem("softmax"), get_problem("rmsnorm")
    return [(sm, reference_candidates("softmax")["triton"]), (sm, _corpus("wrong_shape")),
            (sm, _corpus("syntax_error")), (rms, reference_candidates("rmsnorm")["triton"])]


def _verdict(r):
    return (r.status, r.category, r.problem, r.problem_sha256, r.candidate_sha256, len(r.seeds))


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Two CPU actors on a local Ray instance the pool starts (and stops when it closes)."""
    assert not ray.is_initialized()
    p = RayPool("cpu", num_workers=2, store=tmp_path_factory.mktemp("ray") / "ray.sqlite", use_cache=False,
                max_retries=1)
    p.warm()
    yield p
    p.close()
    assert not ray.is_initialized()   # the last user of the local instance shut it down


def _kill_when_running(pool, item: int, after_s: float = 0.7) -> threading.Thread:
    """Kill the actor evaluating `item` once it has been at it for `after_s` seconds."""
    def kill():
        deadline = time.monotonic() + 60
        while pool.actor_for(item) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)
        handle = pool.actor_for(item)
        if handle is not None:
            ray.kill(handle, no_restart=True)
    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def test_same_results_as_the_local_pool_and_stored_as_they_arrive(pool, tmp_path):
    items = _mix()
    stored_when_seen = []
    before = pool.store.count()
    results = pool.evaluate_many(items, on_result=lambda i, r: stored_when_seen.append(pool.store.count() - before))
    with LocalPool("cpu", num_workers=2, store=tmp_path / "local.sqlite", use_cache=False) as local:
        expected = local.evaluate_many(items)
    assert [_verdict(r) for r in results] == [_verdict(r) for r in expected], [r.reason for r in results]
    assert [r.status for r in results] == ["correct", "incorrect", "compile_error", "correct"]
    # each result was in the store before on_result saw it: nothing waits for the batch to end
    assert stored_when_seen == [1, 2, 3, 4]
    assert pool.size == 2 and pool.backend == "cpu"


def test_the_store_serves_results_back_as_a_local_judge_would(pool):
    item = (get_problem("softmax"), reference_candidates("softmax")["triton"])
    pool.use_cache = True
    try:
        pool.evaluate(*item)
        again = pool.evaluate(*item)
    finally:
        pool.use_cache = False
    assert again.status == "correct" and again.cached


def test_killed_actor_is_retried_on_another(pool):
    sm = get_problem("softmax")
    stats = dict(pool.stats)
    killer = _kill_when_running(pool, 0)
    before = pool.store.count()
    results = pool.evaluate_many([(sm, Candidate(SLOW)), (sm, reference_candidates("softmax")["triton"])])
    killer.join()
    assert [r.status for r in results] == ["correct", "correct"], [r.reason for r in results]
    assert pool.stats["retries"] == stats["retries"] + 1
    assert pool.stats["actors_replaced"] == stats["actors_replaced"] + 1
    assert pool.store.count() == before + 2


def test_retries_run_out_as_a_categorized_failure(pool):
    sm = get_problem("softmax")
    pool.max_retries = 0
    try:
        killer = _kill_when_running(pool, 0)
        res = pool.evaluate(sm, Candidate(SLOW + "# another\n"))
        killer.join()
    finally:
        pool.max_retries = 1
    assert res.status == "runtime_error" and res.category == "worker_lost", res.reason
    assert "gave up after 0 retries" in res.reason
    # the pool replaced the actor and goes on
    again = pool.evaluate(sm, reference_candidates("softmax")["triton"])
    assert again.status == "correct", again.reason
    assert len(pool.actors) == 2


def test_bad_cluster_requests_are_clear_errors(pool):
    with pytest.raises(RayPoolError, match="no GPUs"):
        RayPool("gpu")
    with pytest.raises(RayPoolError, match="at most"):
        RayPool("cpu", num_workers=64)
    with pytest.raises(RayPoolError, match="HOST:PORT"):
        _probe("head-node:port")
    assert ray.is_initialized() and len(pool.actors) == 2   # the failed pools released nothing of ours


def test_actors_that_cannot_start_are_given_up(pool):
    """The fixture holds every CPU of the local instance: a third actor can never be placed."""
    stuck = RayPool("cpu", num_workers=1, store=False, start_timeout_s=2)
    try:
        res = stuck.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
        assert res.status == "runtime_error" and res.category == "judge", res.reason
        assert "did not start within 2 s" in res.reason
        with pytest.raises(RayPoolError, match="no judge actor is running"):
            stuck.warm()
    finally:
        stuck.close()
    assert ray.is_initialized() and len(pool.actors) == 2


def test_unreachable_address_fails_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # nothing listens there once closed
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "judge", "softmax", "reference", "--backend",
                          "cpu", "--pool", "ray", "--ray-address", f"127.0.0.1:{port}", "--json", "--no-store"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr[-2000:])
    assert "no Ray cluster answers" in json.loads(out.stdout)["error"]    # --json: the failure as one object
    assert "no Ray cluster answers" in out.stderr and f"127.0.0.1:{port}" in out.stderr
    assert time.monotonic() - t0 < 60


def test_env_pool_option(pool):
    import gymnasium as gym
    env = gym.make("MegaKernel-v0", backend="cpu", pool=pool)
    try:
        env.reset(seed=0, options={"problem": "softmax"})
        code = reference_candidates("softmax")["triton"].source
        _, _, _, _, info = env.step(f"```python\n{code}\n```")
        assert info["eval"]["status"] == "correct"
    finally:
        env.close()
    assert len(pool.actors) == 2   # the env does not close a pool it was given
    with pytest.raises(ValueError, match="unknown pool"):
        gym.make("MegaKernel-v0", backend="cpu", pool="slurm")
    # the vector env's batch of kernels goes to the Ray pool as one evaluate_many
    from megakernel_gym.env.vector import MegaKernelVectorEnv
    envs = MegaKernelVectorEnv(num_envs=2, backend="cpu", pool=pool)
    try:
        envs.reset(seed=0, options={"problem": "softmax"})
        _, _, _, _, infos = envs.step([f"```python\n{code}\n```", _corpus("wrong_shape").source])
        assert list(infos["eval"]["status"]) == ["correct", "incorrect"]
    finally:
        envs.close()
    assert len(pool.actors) == 2


# -- the HTTP reward service ------------------------------------------------------------------
@pytest.fixture(scope="module")
def service(pool):
    app = make_app(pool, resolve_problem=get_problem, max_request_bytes=64_000, timeout_s=120)
    server, thread, url = serve_in_thread(app)
    yield url
    server.should_exit = True
    thread.join(15)


def _post(url: str, body: bytes) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/evaluate", data=body, method="POST"),
                                    timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


def test_http_round_trip_and_reward_function(service):
    client = RewardClient(service)
    health = client.health()
    assert health["ok"] and health["backend"] == "cpu" and health["pool"] == "RayPool"
    ref = reference_candidates("softmax")["triton"].source
    results = client.evaluate_many([("softmax", ref), ("softmax", _corpus("wrong_shape")),
                                    (get_problem("rmsnorm"), reference_candidates("rmsnorm")["triton"])])
    assert [r.status for r in results] == ["correct", "incorrect", "correct"], [r.reason for r in results]
    # TRL's call: completions (plain or conversational) and the dataset's columns as keywords
    reward_fn = make_reward_fn(service)
    rewards = reward_fn(prompts=["p"] * 3, completions=[f"Here:\n```python\n{ref}\n```",
                                                       [{"role": "assistant", "content": "no code, sorry"}],
                                                       _corpus("wrong_shape").source],
                        problem=["softmax"] * 3, completion_ids=None)
    assert rewards == [0.0, -1.0, -0.5]   # cpu: correct is 0 (no speedup); no kernel: the failure tier
    with pytest.raises(ValueError, match="dataset column 'problem'"):
        reward_fn(prompts=["p"], completions=[ref], level=[1])


def test_http_bad_requests_are_refused_clearly(service):
    code, msg = _post(service, b"{" + b" " * 70_000 + b"}")
    assert code == 413 and "limit is 64,000" in msg
    # a chunked body declares no length: counted as it arrives
    conn = http.client.HTTPConnection(service.split("//")[1], timeout=30)
    conn.request("POST", "/evaluate", body=iter([b"x" * 30_000] * 3), encode_chunked=True)
    answer = conn.getresponse()
    assert answer.status == 413 and b"limit" in answer.read()
    conn.close()
    code, msg = _post(service, b'{"items": [{"problem": "softmax", "candidate": ')
    assert code == 400 and "not valid JSON" in msg
    code, msg = _post(service, b'{"items": [{"problem": "softmax"}]}')
    assert code == 422 and "items.0.candidate" in msg
    code, msg = _post(service, json.dumps({"items": [{"problem": "no_such_op", "candidate": "x"}]}).encode())
    assert code == 400 and "item 0: no built-in problem 'no_such_op'" in msg
    # a problem file's code would run in the unsandboxed reference worker: refused unless the server allows it
    evil = get_problem("softmax").source + "\nimport os\nos.system('touch /tmp/pwned')\n"
    code, msg = _post(service, json.dumps({"items": [{"problem": "softmax", "problem_source": evil,
                                                      "candidate": "x"}]}).encode())
    assert code == 400 and "takes no problem files" in msg and "--allow-problem-source" in msg
    with pytest.raises(ValueError, match="resolve_problem"):
        make_app(None)
    # the client splits what fits and answers for what never can, without a round trip
    big = RewardClient(service).evaluate_many([("softmax", "#" * 80_000)])
    assert big[0].status == "compile_error" and big[0].category == "too_large"
    with pytest.raises(RewardServiceError, match="did not answer"):
        RewardClient("http://127.0.0.1:9", timeout_s=5).health()


def test_http_timeout_answers_504_and_keeps_the_result(pool):
    app = make_app(pool, resolve_problem=get_problem, timeout_s=0.5)
    server, thread, url = serve_in_thread(app)
    try:
        before = pool.store.count()
        code, msg = _post(url, json.dumps({"items": [{"problem": "softmax", "candidate": SLOW + "# 504\n"}]}).encode())
        assert code == 504 and "results store" in msg
        deadline = time.monotonic() + 90
        while pool.store.count() == before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool.store.count() == before + 1   # the batch ran on and its result was kept
    finally:
        server.should_exit = True
        thread.join(15)


def test_bench_dry_run(tmp_path):
    """The GPU benchmark's CPU path, end to end: both pools, side by side, results written."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "bench" / "ray_bench.py"), "overhead", "--dry-run", "--n", "2",
                        "--reps", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "ray_overhead.json").read_text())
    assert {"device", "date", "command", "rows", "targets"} <= set(doc) and "DRY RUN" in doc["notes"]
    pools = {row["pool"] for row in doc["rows"] if "pool" in row}
    assert pools == {"local", "ray"} and all(row["statuses"] == {"correct": 2} for row in doc["rows"] if "pool" in row)
    assert doc["targets"][0]["measured"] is not None
