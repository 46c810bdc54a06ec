"""Least privilege for the candidate worker (rewards/isolation.py): a candidate that owns its process
(any Python, ctypes included; the static checks and the run-time Python guard are off here, so only
the operating system's walls stand) tries to unmount, remount, read and forge the results store,
write the package and files outside its scratch folder, trace and signal the judge, make namespaces,
raise privileges, and start threads and processes. Each attempt must be refused, the store must stay
intact, and nothing may be written outside the scratch folder."""
import contextlib
import hashlib
import json
import os
import re
import secrets
import socket
import sqlite3
import sys
from pathlib import Path

import pytest

import megakernel_gym
from megakernel_gym.cache_paths import judge_run_dir
from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.rewards import Candidate, Judge, Problem

if os.geteuid() != 0:
    pytest.skip("the worker's namespaces and mounts need root", allow_module_level=True)

PACKAGE_FILE = str(Path(megakernel_gym.__file__).resolve())

# Each attack returns normally only where it got through; the candidate reports every outcome in the
# message of the exception it raises, which the judge returns as the result's reason.
ATTACKS = r'''
import ctypes, errno, gc, json, os, signal, socket, subprocess, threading
import torch
import torch.nn as nn

STORE = "".join(reversed(STORE_REVERSED))   # kept reversed in this module: the worker's memory is searched below
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long


def c(rc):
    if rc == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc


def caps():
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return {k: int(status[k].strip(), 16) for k in ("CapEff", "CapPrm", "CapBnd")}


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def vm_read(pid):
    buf = ctypes.create_string_buffer(64)
    local, remote = IoVec(ctypes.addressof(buf), 64), IoVec(0x400000, 64)
    return c(libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))


def raise_caps():
    os.setuid(0)           # uid 0 already, or nobody: either way no capability may come back
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
    full = (ctypes.c_uint32 * 6)(*([0xFFFFFFFF] * 6))
    c(libc.capset(hdr, full))
    if any(caps().values()):
        return caps()
    raise PermissionError(f"no capability: {caps()}")


def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return os.waitpid(pid, 0)


def thread():
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()


def store_path_in_memory():
    """The worker's own objects (not this module's): does any hold the store's path?"""
    for o in gc.get_objects():
        if isinstance(o, (list, tuple)) and any(x == STORE for x in o if isinstance(x, str)):
            return type(o).__name__
        if isinstance(o, dict) and o is not globals() and any(v == STORE for v in o.values() if isinstance(v, str)):
            return "dict"
    if STORE.encode() in open("/proc/self/environ", "rb").read() or STORE in os.environ.values():
        return "environment"
    raise LookupError("nowhere")


def secret_in_environ():
    if b"MKGYM_LP_SECRET_TOKEN" in open("/proc/self/environ", "rb").read() or "MKGYM_LP_SECRET_TOKEN" in os.environ:
        return "seen"
    raise LookupError("nowhere")


def daemon_sockets():
    """Unix sockets of the host's daemons (systemd, D-Bus, docker, tmux, MPS) in sight?"""
    import stat
    seen = []
    for top in ("/run", "/var/run", "/tmp"):
        for root, dirs, files in os.walk(top):
            seen += [os.path.join(root, f) for f in files if stat.S_ISSOCK(os.lstat(os.path.join(root, f)).st_mode)]
    if seen:
        return seen[:3]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for path in ("/run/systemd/private", "/run/dbus/system_bus_socket", "/var/run/docker.sock"):
        try:
            s.connect(path)
            return path
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
    raise FileNotFoundError(errno.ENOENT, "no daemon socket")


def judge_server_socket():
    """The user's judge servers' sockets in sight (rewards/judge_server.py)? A server judges problem files,
    whose code its reference worker runs with the user's privileges."""
    import stat
    seen = [f for f in os.listdir(RUN_DIR) if stat.S_ISSOCK(os.lstat(os.path.join(RUN_DIR, f)).st_mode)]
    if seen:
        return seen[:2]
    raise FileNotFoundError(errno.ENOENT, "no judge server socket")


def mount_setattr_rw():
    attr = (ctypes.c_uint64 * 4)(0, 1, 0, 0)        # clear MOUNT_ATTR_RDONLY
    return c(libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), 32))


ATTACKS = {
    "umount_store_cover": lambda: c(libc.umount2(os.path.dirname(STORE).encode(), 2)),
    "umount_root": lambda: c(libc.umount2(b"/", 2)),
    "remount_root_rw": lambda: c(libc.mount(None, b"/", None, 32 | 4096, None)),   # MS_REMOUNT|MS_BIND
    "mount_setattr_rw": mount_setattr_rw,
    "mount_tmpfs": lambda: c(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)),
    "read_store": lambda: open(STORE, "rb").read(64),
    "write_store": lambda: open(STORE, "r+b").write(b"garbage"),
    "create_store_sidecar": lambda: open(STORE + "-journal", "wb").write(b"x"),
    "store_path_in_memory": store_path_in_memory,
    "secret_in_environ": secret_in_environ,
    "write_package": lambda: open(PACKAGE_FILE, "ab").write(b"# owned\n"),
    "write_tmp": lambda: open(f"/tmp/mkgym-lp-{NONCE}", "w").write("x"),
    "write_root": lambda: open(f"/root/mkgym-lp-{NONCE}", "w").write("x"),
    "write_proc_sys": lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/bin/false"),
    "write_sysrq": lambda: open("/proc/sysrq-trigger", "w").write("h"),
    "open_block_device": lambda: open("/dev/loop0", "r+b"),
    "ptrace_pid1": lambda: c(libc.ptrace(16, 1, None, None)),          # PTRACE_ATTACH
    "ptrace_judge": lambda: c(libc.ptrace(16, JUDGE_PID, None, None)),
    "vm_readv_pid1": lambda: vm_read(1),
    "vm_readv_judge": lambda: vm_read(JUDGE_PID),
    "signal_judge": lambda: os.kill(JUDGE_PID, 0),
    "signal_parent": lambda: os.kill(os.getppid(), 0) if os.getppid() else os.kill(-1, 0),
    "unshare_user": lambda: c(libc.unshare(0x10000000)),
    "unshare_mount": lambda: c(libc.unshare(0x00020000)),
    "raise_privileges": raise_caps,
    "unix_socket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close(),
    "daemon_sockets": daemon_sockets,
    "judge_server_socket": judge_server_socket,
    "tcp_socket": lambda: socket.create_connection(("127.0.0.1", 22), timeout=1),
    "thread": thread,
    "fork": fork,
    "subprocess": lambda: subprocess.run(["/bin/true"]).returncode,
}


class ModelNew(nn.Module):
    def forward(self, x):
        out = {}
        for name, attack in ATTACKS.items():
            try:
                got = attack()
            except BaseException as e:  # noqa: BLE001  (the reason is cut at 2,000 characters: short words)
                why = errno.errorcode.get(e.errno, "") if isinstance(e, OSError) and e.errno else type(e).__name__
                out[name] = f"denied {why}"
            else:
                out[name] = f"ALLOWED {got!r}"[:40]
        raise RuntimeError("REPORT " + json.dumps(out))
'''

STATUS = r'''
import json, os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
        keep = {k: status[k].strip() for k in ("Uid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                                 "NoNewPrivs", "Seccomp")}
        keep["dev"] = sorted(os.listdir("/dev"))
        keep["writable"] = [p for p in ("/", "/tmp", "/dev/shm", os.getcwd()) if os.access(p, os.W_OK)]
        keep["cwd"] = os.getcwd()
        raise RuntimeError("REPORT " + json.dumps(keep))
'''


def _report(res) -> dict:
    m = re.search(r"REPORT (\{.*\})", res.reason or "")
    assert m, (res.status, res.reason)
    return json.loads(m.group(1))


def _integrity(path) -> tuple[str, int]:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0], con.execute(
            "SELECT COUNT(*) FROM evaluations").fetchone()[0]
    finally:
        con.close()


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


SECRET = "MKGYM_LP_SECRET_TOKEN"


@pytest.fixture(scope="module")
def bare_judge(tmp_path_factory):
    """A judge whose Python-level rules are off: only the operating system's layers stand. Its workers
    start with a secret and the store's path in their environment (scrubbed inside)."""
    store = tmp_path_factory.mktemp("least_privilege") / "results.sqlite"
    saved = {k: os.environ.get(k) for k in (SECRET, "MKGYM_STORE")}
    os.environ.update({SECRET: secrets.token_hex(8), "MKGYM_STORE": str(store)})
    j = Judge(backend="cpu", store=store, timeout_s=60, use_cache=False, static_checks=False, python_guard=False)
    try:
        j.warm()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    yield j
    j.close()


def _attack_source(judge, nonce: str) -> str:
    store = str(judge.store.path)
    return ATTACKS.replace("import torch\n", "import torch\n"
                           f"STORE_REVERSED = {store[::-1]!r}\nJUDGE_PID = {os.getpid()}\n"
                           f"RUN_DIR = {str(judge_run_dir())!r}\n"
                           f"PACKAGE_FILE = {PACKAGE_FILE!r}\nNONCE = {nonce!r}\n", 1)


@contextlib.contextmanager
def _a_judge_server_socket(nonce: str):
    """A listening socket in the judge servers' folder, as a running server leaves one."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock = judge_run_dir() / f"judge-cpu-lp{nonce}.sock"
    server.bind(str(sock))
    server.listen(1)
    try:
        yield sock
    finally:
        server.close()
        sock.unlink()


@pytest.fixture(scope="module")
def attack_report(bare_judge):
    """Every attack, run once from inside a candidate; the store and the files outside scratch checked."""
    nonce = secrets.token_hex(6)
    store = str(bare_judge.store.path)
    source = _attack_source(bare_judge, nonce)
    bare_judge.warm()
    before = bare_judge.store.count()
    package_sha = _sha(PACKAGE_FILE)
    with _a_judge_server_socket(nonce):
        res = bare_judge.evaluate(get_problem("softmax"), Candidate(source))
    assert res.status == "runtime_error" and res.category == "exception", (res.status, res.category, res.reason)
    # the judge survived (we are here), the store kept every row and took this one, nothing outside scratch
    assert _integrity(bare_judge.store.path) == ("ok", before + 1)
    assert _sha(PACKAGE_FILE) == package_sha
    assert not Path(f"/tmp/mkgym-lp-{nonce}").exists() and not Path(f"/root/mkgym-lp-{nonce}").exists()
    assert not Path(store + "-journal").exists() or Path(store + "-journal").stat().st_size == 0
    return _report(res)


SECCOMP_DENIED = ["umount_store_cover", "umount_root", "remount_root_rw", "mount_setattr_rw", "mount_tmpfs",
                  "ptrace_pid1", "ptrace_judge", "vm_readv_pid1", "vm_readv_judge", "unshare_user",
                  "unshare_mount", "unix_socket", "tcp_socket", "fork", "subprocess"]
OTHER_DENIED = ["read_store", "write_store", "create_store_sidecar", "store_path_in_memory", "secret_in_environ",
                "daemon_sockets", "judge_server_socket", "write_package", "write_tmp", "write_root", "write_proc_sys", "write_sysrq",
                "open_block_device", "signal_judge", "signal_parent", "raise_privileges", "thread"]


@pytest.mark.parametrize("attack", SECCOMP_DENIED + OTHER_DENIED)
def test_attack_is_denied(attack_report, attack):
    got = attack_report[attack]
    assert got.startswith("denied"), f"{attack}: {got}"
    if attack in SECCOMP_DENIED:   # the filter answers EPERM: a Python error, a clear failure, no kill
        assert got == "denied EPERM", got
    if attack == "judge_server_socket":   # its folder is covered: nothing there to find
        assert got == "denied ENOENT", got


def test_every_attack_was_tried(attack_report):
    assert set(attack_report) == set(SECCOMP_DENIED + OTHER_DENIED)


def test_candidate_runs_without_privileges(bare_judge):
    """From inside: no capability in any set, no new privileges, a seccomp filter, a /dev of the few
    devices a worker uses, and nothing writable but the scratch folder (the cwd)."""
    bare_judge.warm()
    info = bare_judge.cand.info
    for layer in ("pid+mount+net+ipc-namespace", "store-hidden (1 folder", "sockets-hidden (/run", "minimal-dev",
                  "read-only", "environ-scrubbed", "no-caps", "no-new-privs", "landlock (abi", "seccomp",
                  "seccomp-cpu"):
        assert layer in info["isolation"], (layer, info)
    assert info["isolation_missing"] == [], info
    ref = bare_judge.ref.info
    assert "store-hidden (1 folder" in ref["isolation"], ref
    r = _report(bare_judge.evaluate(get_problem("softmax"), Candidate(STATUS)))
    assert r["CapEff"] == r["CapPrm"] == r["CapBnd"] == r["CapInh"] == r["CapAmb"] == "0000000000000000", r
    assert r["NoNewPrivs"] == "1" and r["Seccomp"] == "2", r
    assert set(r["dev"]) <= {"null", "zero", "full", "random", "urandom", "stdin", "stdout", "stderr", "fd", "shm"}, r
    assert r["writable"] == [r["cwd"]] and r["cwd"].startswith(os.path.dirname(bare_judge.cand.workdir)), r


def test_honest_candidate_still_correct(bare_judge):
    """The layers leave an honest Triton kernel (run by the interpreter) correct, store rows intact."""
    res = bare_judge.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
    assert res.status == "correct", res.reason


def test_neither_worker_sees_the_store(bare_judge):
    """The problem's own code runs in both workers (the reference's too): the store is hidden from it."""
    base = get_problem("softmax").source
    probe = ("\nimport os as _os\n_STORE = " + repr(str(bare_judge.store.path)) + "\n"
             "def _seen():\n    try:\n        open(_STORE, 'rb').read(16)\n        return True\n"
             "    except OSError:\n        return False\n"
             "_get_inputs = get_inputs\n"
             "def get_inputs():\n    if _seen():\n        raise RuntimeError('this worker read the store')\n"
             "    return _get_inputs()\n")
    problem = Problem.from_source(base + probe, "softmax_store_probe")
    res = bare_judge.evaluate(problem, reference_candidates("softmax")["triton"])
    assert res.status == "correct", res.reason


def test_libseccomp_is_present_here():
    """The seccomp layer needs libseccomp (through pyseccomp); a worker without it says so in its
    isolation report and the judge keeps working, but here (and in CI) it must be on."""
    import pyseccomp
    assert pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "mount") >= 0


def test_the_worker_stays_root_where_nobody_could_not_import_what_it_needs(monkeypatch):
    """In a venv the standard library stays under the base interpreter's prefix (a pyenv under
    /root, mode 700) while torch is in the venv: a worker that became `nobody` there failed at
    `import resource`. Every folder on the import path must be readable by others first."""
    import shutil
    import tempfile
    from megakernel_gym.rewards import isolation as iso
    top = Path(tempfile.mkdtemp(prefix="mkgym-import-path-", dir="/tmp"))
    try:
        top.chmod(0o755)
        private, open_ = top / "private", top / "open"
        private.mkdir(mode=0o700)
        open_.mkdir(mode=0o755)
        (top / "link").symlink_to(private)      # judged by what it points to
        private.chmod(0o700)
        open_.chmod(0o755)
        assert iso._readable_by_others(str(open_)) and not iso._readable_by_others(str(private))
        assert not iso._readable_by_others(str(top / "link"))
        monkeypatch.setattr(sys, "path", [str(open_), str(top / "link")] + sys.path)
        bad = iso.unreadable_import_paths()
        assert str(top / "link") in bad and str(open_) not in bad, bad
        if os.geteuid() == 0:
            assert iso._become_nobody(str(top)) is False and os.geteuid() == 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_missing_layer_is_reported_and_the_judge_keeps_working(tmp_path, monkeypatch):
    """Without libseccomp (here: a pyseccomp that cannot find it, first on the workers' import path)
    the worker names the layer as missing, the judge warns once and still judges, every other layer on."""
    import shutil
    import tempfile
    fake = Path(tempfile.mkdtemp(prefix="mkgym-fake-site-", dir="/tmp"))   # readable by `nobody` too
    try:
        fake.chmod(0o755)
        (fake / "pyseccomp.py").write_text('raise RuntimeError("Unable to find libseccomp")\n')
        (fake / "pyseccomp.py").chmod(0o644)
        monkeypatch.syspath_prepend(str(fake))
        with Judge(backend="cpu", store=tmp_path / "r.sqlite", timeout_s=60, use_cache=False) as j:
            with pytest.warns(RuntimeWarning, match="seccomp"):
                j.warm()
            info = j.cand.info
            assert any(m.startswith("seccomp (RuntimeError: Unable to find libseccomp")
                       for m in info["isolation_missing"]), info
            assert "seccomp" not in info["isolation"] and "no-caps" in info["isolation"], info
            res = j.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
            assert res.status == "correct", res.reason
    finally:
        shutil.rmtree(fake, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# the gpu backend: the same layers, threads and processes allowed (CUDA, CUPTI, ptxas)


@pytest.fixture(scope="module")
def bare_gpu_judge(tmp_path_factory):
    store = tmp_path_factory.mktemp("least_privilege_gpu") / "results.sqlite"
    j = Judge(backend="gpu", store=store, timeout_s=120, use_cache=False, static_checks=False, python_guard=False)
    yield j
    j.close()


# CUDA's threads, Triton's ptxas, CUDA's unix socket (made at cuInit)
GPU_ALLOWED = {"thread", "fork", "subprocess", "unix_socket"}


@pytest.mark.gpu
def test_gpu_candidate_runs_without_privileges(bare_gpu_judge):
    bare_gpu_judge.warm()
    info = bare_gpu_judge.cand.info
    for layer in ("pid+mount+net+ipc-namespace", "store-hidden (1 folder", "sockets-hidden (/run", "minimal-dev",
                  "read-only", "environ-scrubbed", "no-caps", "no-new-privs", "landlock (abi", "seccomp"):
        assert layer in info["isolation"], (layer, info)
    assert "seccomp-cpu" not in info["isolation"] and info["isolation_missing"] == [], info
    r = _report(bare_gpu_judge.evaluate(get_problem("softmax"), Candidate(STATUS)))
    assert r["CapEff"] == r["CapPrm"] == r["CapBnd"] == "0000000000000000", r
    assert r["NoNewPrivs"] == "1" and r["Seccomp"] == "2", r
    assert any(d.startswith("nvidia") for d in r["dev"]), r
    assert r["writable"] == [r["cwd"]], r


@pytest.mark.gpu
def test_gpu_attacks_are_denied(bare_gpu_judge):
    nonce = secrets.token_hex(6)
    source = _attack_source(bare_gpu_judge, nonce)
    before = bare_gpu_judge.store.count()
    with _a_judge_server_socket(nonce):     # the gpu worker may make unix sockets: only hiding keeps it out
        res = bare_gpu_judge.evaluate(get_problem("softmax"), Candidate(source))
    report = _report(res)
    assert report["judge_server_socket"] == "denied ENOENT", report
    for attack, got in report.items():
        if attack in GPU_ALLOWED:
            assert got.startswith("ALLOWED"), (attack, got)   # and what they start holds no more than the worker
        else:
            assert got.startswith("denied"), (attack, got)
    assert _integrity(bare_gpu_judge.store.path) == ("ok", before + 1)
    assert not Path(f"/tmp/mkgym-lp-{nonce}").exists()


@pytest.mark.gpu
def test_gpu_honest_triton_candidate_correct_and_timed(bare_gpu_judge):
    """Triton compiles (ptxas runs in the locked-down worker), CUPTI profiles, the timing runs."""
    res = bare_gpu_judge.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
    assert res.status == "correct", res.reason
    assert res.speedup and res.timing["samples"] >= 30


def test_the_judge_servers_folders_are_covered_outside_tmp_too(tmp_path, monkeypatch):
    """Every folder a judge server of this user's may use is covered whole in both workers, wherever it
    is and whichever environment started the server: here this process names one run dir
    (MKGYM_RUN_DIR) while a server started without it would use the cache's, both under the home
    directory, which neither /tmp's nor /run's cover reaches. A candidate finds no server to hand work."""
    home = Path.home() / ".cache" / f"mkgym-lp-{secrets.token_hex(4)}"
    run, cache = home / "run", home / "cache"
    monkeypatch.setenv("MKGYM_RUN_DIR", str(run))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))        # platformdirs' user cache dir
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    j = Judge(backend="cpu", store=tmp_path / "r.sqlite", timeout_s=60, use_cache=False, static_checks=False,
              python_guard=False)
    try:
        j.warm()
        for w in (j.cand, j.ref):
            assert "store-hidden (1 folder(s), 0 file(s), 2 covered whole)" in w.info["isolation"], w.info
        other = cache / "megakernel-gym" / "run"
        for d in (run, other):
            (d / "judge-cpu-probe.sock").write_text("")    # stands for a server's socket
        look = ("import os\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                "    def forward(self, x):\n"
                f"        raise RuntimeError('REPORT ' + repr([os.listdir(d) for d in {[str(run), str(other)]!r}]))\n")
        res = j.evaluate(get_problem("softmax"), Candidate(look))
        assert "REPORT [[], []]" in res.reason, res.reason
        assert (other / "judge-cpu-probe.sock").exists()   # the judge's own view is untouched
    finally:
        j.close()
        import shutil
        shutil.rmtree(home, ignore_errors=True)


LINKED_CHANNEL = r'''
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.rmdir("out")                  # its own channel, empty while it runs (cwd: its scratch folder)
        os.symlink(VICTIM, "out")        # what the judge would clear after this evaluation
        raise RuntimeError("left a link where the channel was")
'''


def test_a_channel_made_a_link_by_the_candidate_is_not_followed(tmp_path):
    """The candidate owns its scratch folder, so with only the OS layers standing it can put a link where
    its channel was (to another slot's channel, to the store's folder). The judge empties the channel
    when an evaluation ends: it must not delete the files the link points at. (A judge that recycles
    failed workers replaces this one anyway; with recycle="never" the judge's own clear meets the link.)
    It replaces the worker instead, and the next honest candidate is judged correct."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("s0_0.bin", "results.sqlite"):
        (victim / name).write_bytes(b"keep")
    src = LINKED_CHANNEL.replace("import torch\n", f"import torch\nVICTIM = {str(victim)!r}\n", 1)
    with Judge(backend="cpu", store=False, timeout_s=60, use_cache=False, static_checks=False,
               python_guard=False, recycle="never") as j:
        j.warm()
        pid = j.cand.proc.pid
        res = j.evaluate(get_problem("softmax"), Candidate(src))
        assert res.status == "runtime_error" and "left a link" in (res.reason + (res.log_tail or "")), res.reason
        assert sorted(os.listdir(victim)) == ["results.sqlite", "s0_0.bin"]
        assert not j.cand.alive                  # replaced at the next command, its folder gone with it
        assert j.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"]).status == "correct"
        assert j.cand.proc.pid != pid
