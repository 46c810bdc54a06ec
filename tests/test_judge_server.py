"""The judge server `mkgym judge` starts on first use (issue 41, item 4): later calls find it, concurrent
first calls start one between them, a dead or idle one is replaced, bad requests leave it up, and a
server only the user can reach. CPU backend; conftest gives the session its own run dir."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import CORPUS

STARTING = "starting a judge server"


def mkgym(*args, env=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "megakernel_gym.cli", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})}, input=stdin)


@pytest.fixture
def run_dir(tmp_path):
    """A run dir of this test's own (a fresh server), its servers stopped afterwards."""
    d = tmp_path / "run"
    yield d
    mkgym("judge-server", "stop", env={"MKGYM_RUN_DIR": str(d)})


def judge(run_dir, store, *extra, env=None):
    return mkgym("judge", "softmax", "reference", "--backend", "cpu", "--json", "--store", str(store), *extra,
                 env={"MKGYM_RUN_DIR": str(run_dir), **(env or {})})


def servers(run_dir):
    r = mkgym("judge-server", "list", "--json", env={"MKGYM_RUN_DIR": str(run_dir)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_later_call_finds_the_server_and_stop_ends_it(run_dir, tmp_path):
    first = judge(run_dir, tmp_path / "r.sqlite")
    assert first.returncode == 0, first.stderr
    assert STARTING in first.stderr and json.loads(first.stdout)["status"] == "correct"
    t0 = time.monotonic()
    second = judge(run_dir, tmp_path / "r.sqlite", "--no-cache")
    warm_s = time.monotonic() - t0
    assert second.returncode == 0, second.stderr
    assert STARTING not in second.stderr and json.loads(second.stdout)["status"] == "correct"
    (srv,) = servers(run_dir)
    assert srv["running"] and srv["served"] == 2 and srv["backend"] == "cpu"
    assert srv["store"] == str((tmp_path / "r.sqlite").resolve())
    assert Path(srv["socket"]).stat().st_mode & 0o777 == 0o600 and run_dir.stat().st_mode & 0o777 == 0o700
    assert warm_s < 30, f"a call to a running server took {warm_s:.1f} s"
    r = mkgym("judge-server", "stop", env={"MKGYM_RUN_DIR": str(run_dir)})
    assert r.returncode == 0 and "stopped 1" in r.stdout
    deadline = time.monotonic() + 30
    while Path(srv["socket"]).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(srv["socket"]).exists() and servers(run_dir) == []


def test_concurrent_first_calls_start_one_server(run_dir, tmp_path):
    env = {**os.environ, "MKGYM_RUN_DIR": str(run_dir)}
    cmd = [sys.executable, "-m", "megakernel_gym.cli", "judge", "softmax", "reference", "--backend", "cpu", "--json",
           "--store", str(tmp_path / "r.sqlite"), "--no-cache"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert all(json.loads(o)["status"] == "correct" for o, _ in outs)
    assert sum(STARTING in e for _, e in outs) == 1
    (srv,) = servers(run_dir)
    assert srv["served"] == 4


def test_a_killed_server_is_replaced(run_dir, tmp_path):
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (srv,) = servers(run_dir)
    os.kill(srv["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{srv['pid']}"):
        time.sleep(0.1)
    (stale,) = servers(run_dir)
    assert not stale["running"]          # its socket is left behind, and nothing answers on it
    again = judge(run_dir, tmp_path / "r.sqlite", "--no-cache")
    assert again.returncode == 0 and STARTING in again.stderr, again.stderr
    (new,) = servers(run_dir)
    assert new["running"] and new["pid"] != srv["pid"]


def test_an_idle_server_leaves(run_dir, tmp_path):
    r = judge(run_dir, tmp_path / "r.sqlite", env={"MKGYM_JUDGE_IDLE": "1"})
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 60
    while list(run_dir.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(run_dir.glob("*.sock"))
    assert "idle for 1 s: leaving" in next(run_dir.glob("*.log")).read_text()


def test_each_store_and_backend_gets_its_own_server(run_dir, monkeypatch):
    from megakernel_gym.rewards import judge_server
    monkeypatch.setenv("MKGYM_RUN_DIR", str(run_dir))
    a = judge_server.socket_path("cpu", "/x/a.sqlite")
    assert a == judge_server.socket_path("cpu", "/x/a.sqlite")
    assert len({a, judge_server.socket_path("cpu", "/x/b.sqlite"), judge_server.socket_path("cpu", None),
                judge_server.socket_path("gpu", "/x/a.sqlite")}) == 4


def _raw(sock: str, payload: bytes) -> dict:
    from megakernel_gym.rewards.judge_server import _address
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, _address(Path(sock)) as addr:
        s.settimeout(60)
        s.connect(addr)   # a deep temporary run dir is past sun_path's 108 bytes: as the client names it
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    return json.loads(data)


def test_bad_requests_get_an_answer_and_the_server_stays_up(run_dir, tmp_path):
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (srv,) = servers(run_dir)
    sock = srv["socket"]
    for payload, needle in ((b"not json\n", "bad request"), (b"[1, 2]\n", "one JSON object"),
                            (b'{"op": "format_disk"}\n', "unknown op"),
                            (b'{"op": "evaluate", "problem": {}}\n', "bad request"),
                            (b'{"op": "evaluate", "problem": {"name": "p", "source": "x = ("}, '
                             b'"candidate": {"source": ""}}\n', "syntax error"),
                            # (red team 17: a 200,000-term expression's RecursionError ended the server)
                            (json.dumps({"op": "evaluate", "problem": {"name": "deep", "source": "x = " + "1+" * 200_000 + "1"},
                                         "candidate": {"source": ""}}).encode() + b"\n", "nested too deep")):
        reply = _raw(sock, payload)
        assert needle in reply["error"], (payload, reply)
    assert _raw(sock, b'{"op": "ping"}\n')["ok"]
    r = judge(run_dir, tmp_path / "r.sqlite", "--no-cache")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "correct"


def test_candidate_outcomes_through_the_server(run_dir, tmp_path):
    bad = CORPUS / "adversarial" / "torch_softmax.py"
    r = mkgym("judge", "softmax", str(bad), "--backend", "cpu", "--json", "--store", str(tmp_path / "r.sqlite"),
              env={"MKGYM_RUN_DIR": str(run_dir)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "rejected"
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                      "        return x\ndef get_inputs():\n    raise ValueError('bad sizes')\n"
                      "def get_init_inputs():\n    return []\n")
    r = mkgym("judge", str(broken), str(CORPUS / "legit" / "relu_kernelbench.py"), "--backend", "cpu", "--no-store",
              env={"MKGYM_RUN_DIR": str(run_dir)})
    assert r.returncode == 2 and "bad sizes" in r.stderr


def test_no_server_judges_in_the_process(run_dir, tmp_path):
    r = judge(run_dir, tmp_path / "r.sqlite", "--no-server")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "correct"
    assert STARTING not in r.stderr
    assert not run_dir.exists() or not list(run_dir.glob("*.sock"))
    r = judge(run_dir, tmp_path / "r.sqlite", env={"MKGYM_JUDGE_SERVER": "0"})
    assert r.returncode == 0 and STARTING not in r.stderr


def test_a_bad_idle_setting_is_an_error_and_a_server_that_cannot_be_used_is_judged_around(run_dir, tmp_path):
    r = judge(run_dir, tmp_path / "r.sqlite", env={"MKGYM_JUDGE_IDLE": "soon"})
    assert r.returncode == 2 and "MKGYM_JUDGE_IDLE='soon'" in r.stderr
    # a run dir the server may not use (others may write to it): the command judges in its own process
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    r = judge(shared, tmp_path / "r.sqlite")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "correct", r.stderr
    assert "may be written by others" in r.stderr and "judging in this process instead" in r.stderr
    assert not list(shared.glob("*.sock"))


def test_a_run_dir_others_may_write_to_is_refused(tmp_path, monkeypatch):
    """A socket planted in a directory others may write to could answer for a judge."""
    from megakernel_gym.rewards import judge_server
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("MKGYM_RUN_DIR", str(d))
    with pytest.raises(judge_server.JudgeServerError, match=r"may be written by others \(mode 777\); `chmod go-w"):
        judge_server.run_dir()
    os.chmod(d, 0o755)
    assert judge_server.run_dir() == d
    fresh = tmp_path / "fresh" / "run"
    monkeypatch.setenv("MKGYM_RUN_DIR", str(fresh))
    assert judge_server.run_dir() == fresh and fresh.stat().st_mode & 0o777 == 0o700


def test_a_server_of_older_code_is_stopped_when_a_new_one_starts(run_dir, tmp_path, monkeypatch):
    """After the package changes, the server that starts for the same backend and store stops the one that
    runs the old code, rather than leave it holding the GPU's memory until it idles out."""
    from megakernel_gym.rewards import judge_server
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (old,) = servers(run_dir)
    monkeypatch.setenv("MKGYM_RUN_DIR", str(run_dir))
    judge_server._stop_older("cpu", old["store"], run_dir / "judge-cpu-new.sock")   # the same code: kept
    (same,) = servers(run_dir)
    assert same["running"] and same["pid"] == old["pid"]
    judge_server._stop_older("cpu", "/elsewhere.sqlite", run_dir / "judge-cpu-new.sock")  # another store
    assert servers(run_dir)[0]["running"]
    with monkeypatch.context() as mp:
        mp.setattr(judge_server, "code_fingerprint", lambda: "newer")
        judge_server._stop_older("cpu", old["store"], run_dir / "judge-cpu-new.sock")
    deadline = time.monotonic() + 30
    while Path(old["socket"]).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(old["socket"]).exists()


def test_a_deep_run_dir_keeps_its_socket(tmp_path):
    """sun_path holds 108 bytes: a longer run dir is reached through /proc/self/fd, and the socket stays in it."""
    deep = tmp_path / ("d" * 90) / "run"
    try:
        r = judge(deep, tmp_path / "r.sqlite")
        assert r.returncode == 0, r.stderr
        (sock,) = deep.glob("judge-cpu-*.sock")
        assert len(str(sock)) > 108
        (srv,) = servers(deep)
        assert srv["running"] and srv["socket"] == str(sock)
    finally:
        mkgym("judge-server", "stop", env={"MKGYM_RUN_DIR": str(deep)})


def test_descends_from_follows_the_parent_chain():
    from megakernel_gym.rewards.judge_server import descends_from
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert descends_from(child.pid, os.getpid())
        assert not descends_from(os.getpid(), child.pid) and not descends_from(os.getppid(), os.getpid())
        assert not descends_from(2 ** 22 + 12345, os.getpid())      # no such process
    finally:
        child.kill()
        child.wait()


def test_a_process_the_server_started_is_refused(tmp_path, monkeypatch):
    """A worker of the server's (any process descended from it) may not hand it work, whatever it sends:
    the kernel names the peer (SO_PEERCRED). Here the server runs in this process and a child connects."""
    from megakernel_gym.rewards import judge_server
    monkeypatch.setenv("MKGYM_RUN_DIR", str(tmp_path / "run"))
    path = judge_server.socket_path("cpu", None)
    srv = judge_server._Server("cpu", None, path, idle_s=60)
    t = threading.Thread(target=srv.serve, daemon=True)
    t.start()
    try:
        assert judge_server.ping(path)["ok"]                  # this process is the server itself: let in
        child = subprocess.run([sys.executable, "-c", (
            "import json, os, socket, sys\n"   # by its name in its folder: a test's path may pass sun_path's 108 bytes
            "os.chdir(os.path.dirname(sys.argv[1])); s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(os.path.basename(sys.argv[1]))\n"
            "try:\n    s.sendall(json.dumps({'op': 'stop'}).encode() + b'\\n'); s.shutdown(socket.SHUT_WR)\n"
            "except OSError:\n    pass   # refused before its request was read: the answer is queued all the same\n"
            "print(s.recv(4096).decode())\n"), str(path)], capture_output=True, text=True, timeout=60)
        assert child.stdout.strip(), child.stderr
        reply = json.loads(child.stdout)
        assert reply["kind"] == "refused" and "may not hand it work" in reply["error"], child
        assert judge_server.ping(path)["ok"]                  # the stop it sent was not obeyed
    finally:
        srv.stopping.set()
        t.join(30)


def test_a_bad_timeout_is_refused_not_stored(run_dir, tmp_path):
    """NaN seconds once made the honest reference a runtime_error that the store then served back."""
    r = judge(run_dir, tmp_path / "r.sqlite", "--timeout", "nan")
    assert r.returncode == 2 and "seconds per evaluation must be a number above 0" in r.stderr
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (srv,) = servers(run_dir)
    ok = json.loads(judge(run_dir, tmp_path / "r.sqlite").stdout)
    assert ok["status"] == "correct"
    src = (Path(__file__).parent.parent / "megakernel_gym" / "curriculum" / "problems" / "softmax.py").read_text()
    for bad in ('"abc"', "NaN", "-1", "1e9", "true"):
        payload = ('{"op": "evaluate", "timeout_s": ' + bad + ', "problem": {"name": "softmax", "source": '
                   + json.dumps(src) + '}, "candidate": {"source": "x = 1"}}\n').encode()
        reply = _raw(srv["socket"], payload)
        assert reply.get("kind") == "request" and "timeout" in reply["error"], (bad, reply)
    again = json.loads(judge(run_dir, tmp_path / "r.sqlite").stdout)
    assert again["status"] == "correct"


def test_a_problem_file_cannot_change_the_verdicts_after_it(run_dir, tmp_path):
    """A problem file's module-level code runs in the server's reference worker; a new reference worker
    after it keeps it from loosening the compare for the calls that follow (red-team finding F2)."""
    from megakernel_gym.curriculum import reference_candidates
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (srv,) = servers(run_dir)
    soft = (Path(__file__).parent.parent / "megakernel_gym" / "curriculum" / "problems" / "softmax.py").read_text()
    poison = ("import megakernel_gym.rewards.correctness as _c\n"
              "_c.tolerances = lambda *a, **k: (1e30, 1e30, 1.0)\n" + soft)
    honest = reference_candidates("softmax")["triton"].source
    reply = _raw(srv["socket"], (json.dumps({"op": "evaluate", "problem": {"name": "mine", "source": poison},
                                              "candidate": {"source": honest}}) + "\n").encode())
    # its code ran in the reference worker: every tolerance 1e30 there, so the compare passes anything, or (where the
    # gate's own import of the tolerances was the patched one) the judge refuses to serve it: a zeros kernel would pass
    assert reply.get("result", {}).get("status") == "correct" or "a kernel that writes zeros" in json.dumps(reply), reply
    wrong = (reference_candidates("softmax")["triton"].source    # 1.7x too large, in its own kernel
             .replace("inv_sum = 1.0 / tl.sum", "inv_sum = 1.7 / tl.sum").replace("e * (1.0 / tl.sum", "e * (1.7 / tl.sum"))
    assert wrong != reference_candidates("softmax")["triton"].source
    cand = tmp_path / "wrong.py"
    cand.write_text(wrong)
    r = mkgym("judge", "softmax", str(cand), "--backend", "cpu", "--json", "--store", str(tmp_path / "r.sqlite"),
              env={"MKGYM_RUN_DIR": str(run_dir)})
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "incorrect", r.stdout[:500]


@pytest.mark.skipif(os.geteuid() != 0, reason="a new mount namespace needs root here")
def test_a_peer_in_another_mount_namespace_is_refused(run_dir, tmp_path):
    """Every judge's workers live in namespaces of their own: a peer outside the server's mount namespace
    is refused, whoever its parent is (here a process of the test's, not the server's)."""
    assert judge(run_dir, tmp_path / "r.sqlite").returncode == 0
    (srv,) = servers(run_dir)
    code = ("import json, os, socket, sys\n"   # by its name in its folder: a test's path may pass sun_path's 108 bytes
            "os.chdir(os.path.dirname(sys.argv[1])); s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(os.path.basename(sys.argv[1]))\n"
            "try:\n    s.sendall(json.dumps({'op': 'stop'}).encode() + b'\\n'); s.shutdown(socket.SHUT_WR)\n"
            "except OSError:\n    pass   # refused before its request was read: the answer is queued all the same\n"
            "print(s.recv(4096).decode())\n")
    r = subprocess.run(["unshare", "--mount", sys.executable, "-c", code, srv["socket"]], capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip(), r.stderr
    reply = json.loads(r.stdout)
    assert reply["kind"] == "refused" and "another mnt namespace" in reply["error"], (r.stdout, r.stderr)
    (still,) = servers(run_dir)
    assert still["running"] and still["pid"] == srv["pid"]
