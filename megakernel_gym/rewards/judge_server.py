"""A judge that outlives the command (issue 41): `mkgym judge` hands its problem and candidate to a
judge server on a Unix socket, starting one on first use, the way a build server (Gradle's daemon,
Bazel's server) is found again by later calls and leaves when idle.

Why: a one-off judge spends its time starting two worker processes that import torch (4.6-5.3 s of
6.4-7.1 s on an H200, judge_start.json); the evaluation itself takes 0.2-0.3 s once the problem's
baselines are in the results store. A server started once keeps its workers warm for every later call.

    client (mkgym judge)                              server (python -m megakernel_gym.rewards.judge_server)
    socket_path(backend, store) --connect--> one JSON request line --> Judge.evaluate (one at a time)
                               <------------ one JSON reply line  <--

A server is keyed by what changes its verdicts: the backend, the results store, the package's code
(every module's size and mtime, so an edited or upgraded package gets a fresh server), the Python
interpreter and the environment variables the judge and its workers read (MKGYM_*, CUDA_*, TRITON_*,
TORCH_*, PYTORCH_*). Its socket lives in a directory only the user can enter (0700: $MKGYM_RUN_DIR,
else $XDG_RUNTIME_DIR/megakernel-gym, else run/ in the user cache), so no other user can hand it work.
Requests are judged one after another, as one Judge must (and timing must have the GPU to itself);
concurrent calls wait their turn. A server with no request for `idle_s` (MKGYM_JUDGE_IDLE, default
900 s) closes its workers and exits; `mkgym judge-server stop` stops the user's servers at once.
The server process is trusted (it is the judge); candidates still run only in its sandboxed workers.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from megakernel_gym.cache_paths import judge_run_dir
from megakernel_gym.rewards.judge import check_timeout, default_timeout

IDLE_S = 900.0                  # a build server's usual patience: long enough for a session of calls
START_TIMEOUT_S = 300.0         # a cold GPU host: workers import torch and start CUDA (5-15 s seen)
MAX_REQUEST_BYTES = 64 << 20    # a problem file and a candidate, with room for an LLM's whole answer
_ENV_PREFIXES = ("MKGYM_", "CUDA_", "TRITON_", "TORCH_", "PYTORCH_")
_ENV_IGNORED = ("MKGYM_JUDGE_IDLE", "MKGYM_RUN_DIR", "MKGYM_JUDGE_SERVER")
_PACKAGE = Path(__file__).resolve().parent.parent


class JudgeServerError(RuntimeError):
    """The judge server could not be started or reached, or it ended mid-request; the message says why
    and where its log is."""


# -- where a server lives ---------------------------------------------------------------------
def run_dir() -> Path:
    """The user's directory of judge servers (sockets, logs, start locks), created 0700. Refuses one that
    someone else owns or others may write to: a socket planted there could answer for a judge."""
    d = judge_run_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = d.stat()
    if st.st_uid != os.getuid():
        raise JudgeServerError(f"the judge servers' directory {d} belongs to another user; set MKGYM_RUN_DIR "
                               "to a directory of your own")
    if st.st_mode & 0o022:
        raise JudgeServerError(f"the judge servers' directory {d} may be written by others (mode "
                               f"{st.st_mode & 0o777:o}); `chmod go-w {d}`, or set MKGYM_RUN_DIR to a private one")
    return d


def code_fingerprint() -> str:
    """Every module of the package (and the CUDA templates codegen reads: codegen/cu/*.cuh) by path, size
    and mtime: a server runs the code it started with."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(_PACKAGE):
        dirnames[:] = sorted(n for n in dirnames if n != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".cuh")):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def server_key(backend: str, store: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) and k not in _ENV_IGNORED}
    blob = json.dumps({"backend": backend, "store": store, "code": code_fingerprint(), "python": sys.executable,
                       "env": sorted(env.items())}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def socket_path(backend: str, store: str | None) -> Path:
    return run_dir() / f"judge-{backend}-{server_key(backend, store)}.sock"


@contextlib.contextmanager
def _address(path: Path):
    """A name to bind or connect `path` by. sun_path holds 108 bytes, and a run dir deep in a temporary
    tree is longer: then the directory is opened and named through /proc/self/fd (Linux), which keeps
    the socket in the private directory instead of one elsewhere."""
    if len(str(path).encode()) <= 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def idle_seconds() -> float:
    raw = os.environ.get("MKGYM_JUDGE_IDLE")
    if raw is None:
        return IDLE_S
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"MKGYM_JUDGE_IDLE={raw!r} is not a number of seconds") from None
    if not v > 0:
        raise ValueError(f"MKGYM_JUDGE_IDLE={raw!r} must be a positive number of seconds")
    return v


# -- the wire ----------------------------------------------------------------------------------
def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _recv(conn: socket.socket, limit: int) -> dict:
    """One JSON line (the peer closes or ends it with a newline); ValueError past `limit` bytes or for
    anything but a JSON object."""
    buf = bytearray()
    while b"\n" not in buf:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"request over {limit} bytes")
    line = bytes(buf).split(b"\n", 1)[0]
    if not line:
        raise EOFError("the peer sent nothing")
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a request is one JSON object")
    return obj


def _call(path: Path, request: dict, timeout: float | None) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5.0)
        with _address(path) as addr:
            conn.connect(addr)
        conn.settimeout(timeout)
        try:
            _send(conn, request)
            conn.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass   # a server that refuses the peer answers without reading: its answer is still there to read
        try:
            return _recv(conn, 1 << 34)
        except EOFError:
            raise JudgeServerError(f"the judge server at {path} closed the connection without an answer "
                                   f"(it may have died; its log: {_log_path(path)})") from None


def _log_path(sock: Path) -> Path:
    return sock.with_suffix(".log")


# -- the client --------------------------------------------------------------------------------
def ping(path: Path) -> dict | None:
    try:
        return _call(path, {"op": "ping"}, timeout=10.0)
    except (OSError, JudgeServerError, ValueError):
        return None


def ensure_server(backend: str, store: str | None, start_timeout_s: float = START_TIMEOUT_S,
                  log=None) -> Path:
    """The socket of a running server for (backend, store), started here if none answers. Concurrent
    callers start one server between them: the start is taken under a lock file."""
    import fcntl
    path = socket_path(backend, store)
    if ping(path):
        return path
    lock = path.with_suffix(".lock")
    with open(lock, "a") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)           # another caller may be starting it: wait for that
        try:
            if ping(path):
                return path
            with contextlib.suppress(FileNotFoundError):
                path.unlink()                    # a dead server's socket
            _stop_older(backend, store, path)
            if log:
                log(f"starting a judge server ({backend} backend; it stays up {idle_seconds():.0f} s after "
                    f"its last call; log: {_log_path(path)})")
            cmd = [sys.executable, "-m", "megakernel_gym.rewards.judge_server", "--backend", backend,
                   "--socket", str(path), "--idle", str(idle_seconds())]
            cmd += ["--store", store] if store else ["--no-store"]
            # its own session (a Ctrl-C at the terminal is the command's, not the server's), its working
            # directory / (never one a later `rm -r` removes; and not the run dir, which its workers would
            # then need, and so keep in sight), this package first on its path
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(_PACKAGE.parent)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
            with open(_log_path(path), "ab") as logf:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True, cwd="/", env=env)
            deadline = time.monotonic() + start_timeout_s
            while time.monotonic() < deadline:
                if path.exists() and ping(path):
                    return path
                if proc.poll() is not None:
                    raise JudgeServerError(f"the judge server did not start: {_failure(path)}")
                time.sleep(0.05)
            proc.kill()
            raise JudgeServerError(f"the judge server did not answer within {start_timeout_s:.0f} s; its log: "
                                   f"{_log_path(path)}")
        finally:
            fcntl.flock(lf, fcntl.LOCK_UN)


def _stop(sock: str) -> bool:
    """Ask the server at `sock` to stop; whether it answered."""
    with contextlib.suppress(OSError, JudgeServerError, ValueError):
        _call(Path(sock), {"op": "stop"}, timeout=30.0)
        return True
    return False


def _stop_older(backend: str, store: str | None, path: Path) -> None:
    """Stop this backend and store's servers that run other code (the package changed since they started):
    each would hold its GPU's memory beside the new one until it idled out."""
    code = code_fingerprint()
    for s in servers():
        if (s["running"] and s["socket"] != str(path) and s.get("backend") == backend and s.get("store") == store
                and s.get("python") == sys.executable and s.get("code") != code):
            _stop(s["socket"])


def _failure(path: Path) -> str:
    """The server's own last word (a FAILED line) from its log, else the log's tail."""
    try:
        lines = _log_path(path).read_text(errors="replace").splitlines()
    except OSError:
        return f"no log at {_log_path(path)}"
    for line in reversed(lines):
        if line.startswith("FAILED: "):
            return line[len("FAILED: "):]
    return "its log ends: " + " | ".join(lines[-5:])


def evaluate(problem, candidate, backend: str, store: str | None, timeout_s: float | None = None,
             use_cache: bool = True, log=None):
    """Judge on the (backend, store) server, starting it if need be: the EvalResult. ProblemError for a
    problem the judge cannot use, JudgeServerError when no server could judge it."""
    from megakernel_gym.rewards.problem import ProblemError
    from megakernel_gym.rewards.result import EvalResult
    path = ensure_server(backend, store, log=log)
    req = {"op": "evaluate", "use_cache": use_cache, "timeout_s": timeout_s,
           "problem": {"name": problem.name, "source": problem.source, "path": problem.path,
                       "tolerance": problem.tolerance},
           "candidate": {"source": candidate.text or candidate.source, "path": candidate.path}}
    # the judge bounds each evaluation itself; this only bounds a server that stopped answering, after
    # the calls queued before this one
    reply = _call(path, req, timeout=24 * 3600.0)
    if "result" in reply:
        return EvalResult.from_dict(reply["result"])
    if reply.get("kind") == "problem":
        raise ProblemError(reply.get("error", "the problem was refused"))
    raise JudgeServerError(f"the judge server could not judge it: {reply.get('error', reply)}")


def servers() -> list[dict]:
    """The user's running servers: their socket and what each says of itself."""
    out = []
    for p in sorted(run_dir().glob("judge-*.sock")):
        info = ping(p)
        out.append({"socket": str(p), "running": bool(info), **(info or {})})
    return out


def stop_all() -> list[str]:
    """Ask every server of the user's to stop; the sockets of those that answered."""
    stopped = []
    for s in servers():
        if s["running"]:
            if _stop(s["socket"]):
                stopped.append(s["socket"])
        else:
            with contextlib.suppress(FileNotFoundError):
                Path(s["socket"]).unlink()
    return stopped


# -- the server --------------------------------------------------------------------------------
def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is among pid's parents (their chain in /proc, as this process's PID namespace
    numbers them)."""
    for _ in range(256):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])   # the field after the state: the parent
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def _peer_refused(conn: socket.socket) -> str:
    """Why this connection may not hand the server work, from what the kernel says of its peer
    (SO_PEERCRED, which the peer cannot forge), or "". Another user is refused (the socket is 0600 in a
    private folder besides), and so is any process this server started, and any in another mount or PID
    namespace than the server's: every judge's workers, which run candidates and the problem files they
    are given, live in namespaces of their own (rewards/isolation.py), and their mount namespace keeps
    the servers' folders out of sight; this is the wall behind that one."""
    import struct
    try:
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except OSError as e:
        return f"refused: the peer's credentials could not be read ({e})"
    if uid != os.getuid():
        return f"refused: uid {uid} is not this server's user"
    if pid <= 0 or descends_from(pid, os.getpid()):
        return "refused: a process this judge server started (one of its workers) may not hand it work"
    for ns in ("mnt", "pid"):   # a sandboxed worker, any judge's, lives in namespaces of its own
        try:
            theirs, ours = os.readlink(f"/proc/{pid}/ns/{ns}"), os.readlink(f"/proc/self/ns/{ns}")
        except OSError as e:
            return f"refused: the peer's {ns} namespace could not be read ({e.strerror})"
        if theirs != ours:
            return (f"refused: the peer runs in another {ns} namespace (a sandboxed worker, or a container); "
                    "judge there with --no-server")
    return ""


class _Server:
    """Evaluations run on the main thread, the one that started the workers: a worker's parent-death
    signal follows the thread that spawned it (isolation._die_with_parent), so a worker restarted from a
    connection's thread would be killed when that thread ends. Connections are read and answered on
    threads of their own; evaluations queue for the main thread, one at a time (a Judge is not
    thread-safe, and timing must have the GPU to itself)."""

    def __init__(self, backend: str, store: str | None, path: Path, idle_s: float):
        from megakernel_gym.rewards.judge import Judge
        self.path, self.idle_s = path, idle_s
        self.code = code_fingerprint()           # the code it runs, as the package stood when it started
        self.judge = Judge(backend=backend, store=store if store else False)
        self.judge.warm()
        self.jobs: queue.Queue = queue.Queue()
        self.pending = 0                       # evaluations queued or running
        self.count_lock = threading.Lock()
        self.last = time.monotonic()
        self.served = 0
        self.started = time.time()
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        with _address(tmp) as addr:
            self.sock.bind(addr)
        os.chmod(tmp, 0o600)
        self.sock.listen(64)
        os.replace(tmp, path)                  # the socket appears only once the workers are ready
        self.inode = path.stat().st_ino

    def info(self) -> dict:
        return {"pid": os.getpid(), "backend": self.judge.backend, "device": self.judge.device,
                "store": str(self.judge.store.path) if self.judge.store else None, "served": self.served,
                "started": self.started, "idle_s": self.idle_s, "pending": self.pending, "python": sys.executable,
                "code": self.code}

    # connection threads
    def accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:                    # closed at shutdown
                return
            self.last = time.monotonic()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            refused = _peer_refused(conn)
            if refused:
                with contextlib.suppress(OSError):
                    _send(conn, {"error": refused, "kind": "refused"})
                return
            try:
                conn.settimeout(60.0)
                req = _recv(conn, MAX_REQUEST_BYTES)
                conn.settimeout(None)
                op = req.get("op")
                if op == "ping":
                    return _send(conn, {"ok": True, **self.info()})
                if op == "stop":
                    _send(conn, {"ok": True, "stopping": True})
                    self.stopping.set()
                    return
                if op != "evaluate":
                    return _send(conn, {"error": f"unknown op {op!r}; expected evaluate, ping or stop",
                                        "kind": "request"})
                done: concurrent.futures.Future = concurrent.futures.Future()
                with self.count_lock:
                    self.pending += 1
                self.jobs.put((req, done))
                _send(conn, done.result())
            except (OSError, ValueError, EOFError) as e:
                with contextlib.suppress(OSError):
                    _send(conn, {"error": f"bad request: {e}", "kind": "request"})

    # the main thread
    def serve(self) -> None:
        threading.Thread(target=self.accept_loop, daemon=True).start()
        try:
            while not self.stopping.is_set():
                try:
                    req, done = self.jobs.get(timeout=0.5)
                except queue.Empty:
                    if not self.pending and time.monotonic() - self.last > self.idle_s:
                        print(f"idle for {self.idle_s:.0f} s: leaving", flush=True)
                        break
                    continue
                try:
                    try:
                        answer = self.evaluate(req)
                    except Exception as e:  # noqa: BLE001 - one request never ends the server (red team 17)
                        answer = {"error": f"{type(e).__name__}: {e}"[:2000], "kind": "internal"}
                    done.set_result(answer)
                finally:
                    with self.count_lock:
                        self.pending -= 1
                    self.last = time.monotonic()
        finally:
            self.close()

    def evaluate(self, req: dict) -> dict:
        from megakernel_gym.rewards.problem import Candidate, CandidateError, Problem, ProblemError
        try:
            p, c = req["problem"], req["candidate"]
            problem = Problem.from_source(p["source"], p["name"], p.get("path"))
            if p.get("tolerance"):
                problem = dataclasses.replace(problem, tolerance=p["tolerance"])
            candidate = Candidate(c["source"], c.get("path"))
        except ProblemError as e:
            return {"error": str(e), "kind": "problem"}
        except (CandidateError, KeyError, TypeError, AttributeError) as e:
            return {"error": f"bad request: {e!r}", "kind": "request"}
        try:
            timeout = check_timeout(req.get("timeout_s"))
        except ValueError as e:
            return {"error": f"bad request: {e}", "kind": "request"}
        self.judge.timeout_s = timeout or default_timeout(self.judge.backend)
        self.judge.use_cache = bool(req.get("use_cache", True))
        try:
            res = self.judge.evaluate(problem, candidate)
        except ProblemError as e:
            return {"error": str(e), "kind": "problem"}
        except Exception as e:  # noqa: BLE001 - the server survives whatever one evaluation raised
            return {"error": f"{type(e).__name__}: {e}", "kind": "internal"}
        self.served += 1
        return {"result": res.to_dict()}

    def close(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self.inode:   # still ours (a later server may own the name)
                self.path.unlink()
        self.sock.close()
        while True:                                      # whoever still waits gets an answer
            try:
                _, done = self.jobs.get_nowait()
            except queue.Empty:
                break
            done.set_result({"error": "the judge server stopped before judging it", "kind": "internal"})
        self.judge.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a judge server (started by mkgym judge; see the module's doc)")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--store", default=None)
    ap.add_argument("--no-store", action="store_true")
    ap.add_argument("--idle", type=float, default=IDLE_S)
    a = ap.parse_args(argv)
    print(f"judge server pid {os.getpid()} starting ({a.backend} backend, socket {a.socket})", flush=True)
    try:
        srv = _Server(a.backend, None if a.no_store else a.store, Path(a.socket), a.idle)
    except Exception as e:  # noqa: BLE001 - the client reads this line and shows it to the user
        print(f"FAILED: {e}", flush=True)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: srv.stopping.set())
    print(f"ready: {json.dumps(srv.info())}", flush=True)
    srv.serve()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
