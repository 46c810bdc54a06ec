"""Crashes, hangs, kill attempts and huge allocations inside the candidate's process: each
is a categorized failure, the worker is replaced, the next evaluation runs normally, and the
results store stays intact. Static checks and the run-time Python guard are switched off here so the
candidates really run (what stands is the worker's isolation, rewards/isolation.py)."""
import sqlite3
from pathlib import Path

import pytest

from conftest import CORPUS, read_expectation
from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.rewards import Candidate, Judge, Problem

SANDBOX = sorted((CORPUS / "sandbox").glob("*.py"))


@pytest.fixture(scope="module")
def raw_judge(tmp_path_factory):
    store = tmp_path_factory.mktemp("sandbox") / "results.sqlite"
    j = Judge(backend="cpu", store=store, timeout_s=25, use_cache=False, static_checks=False, python_guard=False)
    yield j
    j.close()


def _integrity(path) -> tuple[str, int]:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0], con.execute(
            "SELECT COUNT(*) FROM evaluations").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("path", SANDBOX, ids=[p.stem for p in SANDBOX])
def test_hostile_candidate_is_contained(raw_judge, path):
    exp = read_expectation(path)
    raw_judge.warm()
    if path.stem == "kill_judge" and raw_judge.cand.info.get("isolation") == "none":
        pytest.skip("no PID namespace here (not root, no user namespaces): a kill would reach the test")
    problem = get_problem("softmax")
    source = exp["source"].replace('os.environ.get("MKGYM_STORE", "")', repr(str(raw_judge.store.path)))
    before = raw_judge.store.count()
    res = raw_judge.evaluate(problem, Candidate(source, str(path)))
    assert res.status == exp["status"], (res.status, res.category, res.reason)
    assert res.category == exp["detail"], (res.category, res.reason)
    # the judge survived (we are still here), the store kept everything and took the new row
    ok, n = _integrity(raw_judge.store.path)
    assert ok == "ok" and n == before + 1
    # and the next evaluation runs normally on a fresh worker
    good = raw_judge.evaluate(problem, reference_candidates("softmax")["triton"])
    assert good.status == "correct", good.reason


def test_workers_are_isolated(raw_judge):
    raw_judge.warm()
    info = raw_judge.cand.info
    assert info["pid"] != 0
    import os
    if os.geteuid() == 0:
        assert info["isolation"].startswith("pid"), info


def test_a_workers_ready_header_says_where_its_start_went(raw_judge):
    """Issue 41 (a one-off `mkgym judge` spends most of its seconds starting workers): each worker
    times its start's phases, and the judge side the whole start from spawn to ready."""
    raw_judge.warm()
    for w in (raw_judge.ref, raw_judge.cand):
        s = w.info["startup_s"]
        assert {"isolate", "import_torch", "cuda_init", "import_triton", "spawn_to_ready"} <= set(s)
        assert "import_dynamo" not in s   # 3.8-5.9 s of a GPU worker's start on an H200; see the next test
        assert s["import_torch"] > 0 and all(v >= 0 for v in s.values())
        # the worker's own phases fit inside the start the judge saw
        assert sum(v for k, v in s.items() if k != "spawn_to_ready") <= s["spawn_to_ready"]
    assert "launch_counter" in raw_judge.cand.info["startup_s"]


def test_torch_dynamos_wrap_of_manual_seed_is_not_tampering_but_a_candidates_is():
    """The worker no longer imports torch._dynamo before its integrity snapshot; an import later (a torch
    call an honest kernel makes may import it lazily) wraps torch.manual_seed, which must not read as the
    candidate's monkeypatch, while a function of the candidate's own, however it dresses, still does."""
    import functools

    import torch

    from megakernel_gym.rewards import sandbox
    real = torch.manual_seed
    try:
        torch.manual_seed = original = torch.random.manual_seed
        snap = sandbox._integrity_snapshot(torch)
        assert sandbox._tampered(torch, snap) == []
        torch.manual_seed = torch._disable_dynamo(original)       # what importing torch._dynamo does
        assert sandbox._tampered(torch, snap) == []

        @functools.wraps(original)
        def fixed_inputs(seed):                                   # the candidate's: same name, __wrapped__
            return original(0)
        torch.manual_seed = fixed_inputs
        assert sandbox._tampered(torch, snap) == ["manual_seed"]
        torch.manual_seed = torch._disable_dynamo(fixed_inputs)   # dynamo's wrap, of the wrong function
        assert sandbox._tampered(torch, snap) == ["manual_seed"]
    finally:
        torch.manual_seed = real


def test_workers_outlive_the_thread_that_started_them(tmp_path):
    """A pool starts workers from threads that end; the workers must stay up (PR_SET_PDEATHSIG
    would kill them with the thread)."""
    import threading
    import time
    j = Judge(backend="cpu", store=tmp_path / "r.sqlite", use_cache=False)
    try:
        t = threading.Thread(target=j.warm)
        t.start()
        t.join()
        time.sleep(1.5)
        assert j.ref.alive and j.cand.alive
        res = j.evaluate(get_problem("rmsnorm"), reference_candidates("rmsnorm")["triton"])
        assert res.status == "correct" and res.phases.get("start_workers", 1.0) < 0.5, res.phases
    finally:
        j.close()


def test_workers_end_when_the_judge_dies(tmp_path):
    """SIGKILL the judge: its worker processes must not live on."""
    import os
    import signal
    import subprocess
    import sys
    import time
    script = ("from megakernel_gym.rewards import Judge\n"
              f"j = Judge('cpu', store={str(tmp_path / 'r.sqlite')!r})\n"
              "j.warm()\nimport os\nprint(j.ref.proc.pid, j.cand.proc.pid, flush=True)\nimport time\ntime.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(os.path.exists(f"/proc/{pid}") and
                                         "Z" not in open(f"/proc/{pid}/stat").read().split()[2] for pid in pids):
        time.sleep(0.2)
    alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]]
    assert not alive, alive


def test_wire_protocol_refuses_pickles():
    """Whatever a compromised worker writes to its pipe is parsed as JSON, never unpickled."""
    import multiprocessing
    import os
    import pickle

    from megakernel_gym.rewards import sandbox

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > /dev/null",))

    a, b = multiprocessing.Pipe()
    a.send_bytes(pickle.dumps(Boom()))
    with pytest.raises(ValueError):
        sandbox.recv(b)
    a.send_bytes(b"[1, 2]")  # JSON, but not an object
    with pytest.raises(ValueError):
        sandbox.recv(b)
    sandbox.send(a, {"ok": True, "n": 1})
    assert sandbox.recv(b) == {"ok": True, "n": 1}


def _candidate_workers() -> dict[int, str]:
    """pid -> the candidate-worker folder its stdout goes to, for every live candidate worker
    process (the namespace's PID 1 included) on this machine."""
    import os
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            target = os.readlink(f"/proc/{pid}/fd/1")
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "mkgym-candidate-" in target and state != "Z":
            out[int(pid)] = target.split("mkgym-candidate-")[1].split("/")[0]
    return out


def test_a_timed_out_worker_is_gone_not_orphaned(tmp_path):
    """A candidate that spins forever times out; every process of that worker must end, also the
    one inside the PID namespace that runs the candidate (as `nobody` where privileges are dropped,
    which clears PR_SET_PDEATHSIG: found leaking in a fresh-venv CI run)."""
    import time
    hang = ("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self, *a):\n"
            "        super().__init__()\n    def forward(self, x):\n        while True:\n            pass\n")
    with Judge(backend="cpu", store=tmp_path / "r.sqlite", timeout_s=8, use_cache=False, static_checks=False,
               python_guard=False) as j:
        j.warm()
        before = _candidate_workers()
        mine = {d for pid, d in before.items() if pid == j.cand.proc.pid or d in
                {before.get(j.cand.proc.pid)}}
        assert mine, before
        res = j.evaluate(get_problem("softmax"), Candidate(hang))
        assert res.status == "timeout", res.reason
        deadline = time.time() + 15
        left = {pid for pid, d in _candidate_workers().items() if d in mine}
        while left and time.time() < deadline:
            time.sleep(0.3)
            left = {pid for pid, d in _candidate_workers().items() if d in mine}
        assert not left, f"orphaned candidate worker(s) still running: {sorted(left)}"


def test_a_worker_uses_the_gpu_its_judge_was_given():
    """device_index counts the devices the judge's process sees: a Ray actor given GPU 1 runs its
    judges on index 0, and their workers must land on physical GPU 1 (they ran on GPU 0, beside the
    other actor's, before this)."""
    from megakernel_gym.rewards.sandbox import visible_device
    assert visible_device(0, "1") == "1"
    assert visible_device(1, "2,3") == "3"
    assert visible_device(0, "GPU-c74d5b55") == "GPU-c74d5b55"
    assert visible_device(1, None) == "1" and visible_device(0, "") == "0"


class _HostOnlyInit:
    """A Model whose __init__ needs a host tensor (numpy): built on the host, then moved."""
    def __new__(cls, n):
        import torch
        m = torch.nn.Linear(n, n)
        m.table = torch.arange(n).numpy()  # raises for a tensor that is not on the host
        return m


class _Mod:
    @staticmethod
    def get_init_inputs():
        return [8]


def test_models_are_built_on_the_judges_device_or_else_on_the_host():
    """Env.model draws a model's parameters on the device (a 'meta' device stands in for the GPU
    here); a class that cannot be built there is built on the host and moved."""
    import torch

    from megakernel_gym.rewards.sandbox import Env
    env = Env("cpu")
    env.device = torch.device("meta")
    seen = []

    class Plain(torch.nn.Linear):
        def __init__(self, n):
            seen.append(torch.empty(1).device.type)   # the default device inside __init__
            super().__init__(n, n)

    m = env.model(Plain, _Mod, 0)
    assert seen == ["meta"] and m.weight.device.type == "meta"
    m = env.model(_HostOnlyInit, _Mod, 0)
    assert m.weight.device.type == "meta" and list(m.table) == list(range(8))
    # a class that fails on the host too fails with the host's error
    class Broken(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            raise ValueError(f"bad size {n}")
    with pytest.raises(ValueError, match="bad size 8"):
        env.model(Broken, _Mod, 0)
    # on the host, the same seed gives the same weights, as before
    env.device = torch.device("cpu")
    assert torch.equal(env.model(Plain, _Mod, 3).weight, env.model(Plain, _Mod, 3).weight)


def test_the_backend_is_resolved_by_asking_the_driver_not_torch(monkeypatch):
    """Issue 41 (a one-off judge): the judge asks libcuda for its devices (judge.cuda_devices) instead of
    importing torch before its workers start; no driver is no GPU, and the count the driver gives picks
    the backend."""
    import ctypes

    from megakernel_gym.rewards import GPUUnavailableError
    from megakernel_gym.rewards.judge import cuda_devices, resolve_backend

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    assert cuda_devices() == 0 and resolve_backend(None) == "cpu" and resolve_backend("cpu") == "cpu"
    with pytest.raises(GPUUnavailableError, match="--backend cpu"):
        resolve_backend("gpu")

    class Driver:
        def __init__(self, n, init=0):
            self.n, self.init = n, init

        def cuInit(self, flags):
            return self.init

        def cuDeviceGetCount(self, ref):
            ref._obj.value = self.n
            return 0
    for n, init, want in ((2, 0, "gpu"), (0, 0, "cpu"), (2, 100, "cpu")):   # 100: CUDA_ERROR_NO_DEVICE
        monkeypatch.setattr(ctypes, "CDLL", lambda name, d=Driver(n, init): d)
        assert resolve_backend(None) == want


def test_the_interpreter_runs_only_kernels_decorated_in_the_candidates_file(raw_judge):
    """Behind anticheat's kernel_form rule: with the static checks and the guard off, Triton's CPU interpreter
    still runs no function of the candidate's file that is not decorated @triton.jit there (the jit-body rules'
    functions, jit_rules.jit_functions): a call-form or aliased-decorator kernel fails with the reason instead of
    running its body as plain Python (which computed softmax in numpy and scored correct), and it reads the
    kernel's file as UTF-8 whatever its `# coding:` line says. Triton's own jit functions (tl.zeros and the
    like) still run, and an honest kernel after them is correct."""
    problem = get_problem("softmax")
    for name in ("jit_call_form_host_numpy.py", "jit_aliased_decorator.py"):
        r = raw_judge.evaluate(problem, Candidate((Path(__file__).parent / "adversarial" / name).read_text()))
        assert r.status == "runtime_error" and "not decorated @triton.jit" in r.reason, (name, r.status, r.reason)
    # a `# coding: utf-7` line made Triton's read of the kernel decode a checked comment into code: the
    # interpreter reads the file as UTF-8, the text the rules read, so the hidden numpy body never runs
    for name in ("source_encoding_utf7.py", "source_encoding_raw_unicode_escape.py"):
        r = raw_judge.evaluate(problem, Candidate((Path(__file__).parent / "adversarial" / name).read_text()))
        assert r.status == "incorrect", (name, r.status, r.reason)
    honest = raw_judge.evaluate(problem, reference_candidates("softmax")["triton"])
    assert honest.status == "correct", honest.reason


def test_recycle_always_gives_each_candidate_a_fresh_worker(tmp_path):
    """State a candidate leaves in its worker's process meets the next candidate only where the worker is kept.
    Red teams 8 and 9, through guard escapes since closed, patched the guard's and Triton's classes and
    sys.modules from a candidate scored correct, for every later candidate in that worker. The wall is a new
    process: recycle="always" gives each evaluation a worker started during the one before it (the judge's
    spare).
    Here the guard and static checks are off (the layer below them is what is tested): the first candidate
    marks the package module, the second computes softmax only where it finds no mark."""
    ref = reference_candidates("softmax")["triton"].source
    at = ref.index("\n", ref.index("    def forward(self")) + 1
    mark = "import megakernel_gym\nmegakernel_gym.LEFT_BEHIND = True\n" + ref
    check = ("import megakernel_gym\n" + ref[:at]
             + "        if getattr(megakernel_gym, 'LEFT_BEHIND', False):\n            return torch.zeros_like(x)\n"
             + ref[at:])
    verdicts = {}
    for recycle in ("never", "always"):
        with Judge(backend="cpu", store=tmp_path / f"{recycle}.sqlite", timeout_s=60, use_cache=False,
                   static_checks=False, python_guard=False, recycle=recycle) as j:
            assert j.evaluate(get_problem("softmax"), mark).status == "correct"
            verdicts[recycle] = j.evaluate(get_problem("softmax"), check).status
            if recycle == "always":
                assert j.cand.alive and not j.cand.ready and j._spare.alive   # the next two are started already
    assert verdicts["always"] == "correct" and verdicts["never"] != "correct", verdicts   # (zeros, no kernel: rejected)
    assert Judge(backend="cpu", store=False).recycle == "failure"
    with pytest.raises(ValueError, match="recycle='sometimes'"):
        Judge(backend="cpu", store=False, recycle="sometimes")


def test_a_candidate_patching_the_guards_or_the_watchers_methods_is_flagged(raw_judge):
    """Behind the guard (here switched off): a candidate that replaces the guard's or the aten-op watcher's
    methods in its worker (red team 10 set Guard._attr_allowed and Inspector.forbidden from a candidate that
    scored correct, so every later candidate in that cpu worker ran unguarded) is a monkeypatch flag, and a
    flagged candidate's worker is replaced."""
    ref = reference_candidates("softmax")["triton"].source
    patch = ("from megakernel_gym.rewards import guard as _g, sandbox as _s\n"
             "_g.Guard._attr_allowed = lambda self, obj, name: True\n"
             "_s.Inspector.forbidden = lambda self: []\n" + ref)
    res = raw_judge.evaluate(get_problem("softmax"), patch)
    assert res.status == "rejected" and "monkeypatch" in {f.rule for f in res.flags}, res.reason
    assert "Guard._attr_allowed" in res.reason and "Inspector.forbidden" in res.reason


def test_torch_state_a_candidate_leaves_behind_is_flagged_and_the_next_candidate_is_unharmed(tmp_path):
    """Red team 14: a correct softmax that on its last checked call entered `torch.device("meta")` in a generator
    it never resumed left the device context on torch's mode stack; the worker was kept (recycle="failure") and the
    next candidate's `torch.empty(shape)` was a meta tensor, so an honest softmax got runtime_error. torch's
    process-wide state (mode stacks, grad and inference mode, default dtype and device...) is compared with the
    worker's at start after every candidate: a change is a monkeypatch flag, and the flagged worker is replaced."""
    here = Path(__file__).parent / "adversarial"
    ref = reference_candidates("softmax")["triton"].source
    victim = ref.replace("torch.empty(x.shape, device=x.device, dtype=x.dtype)", "torch.empty(x.shape, dtype=x.dtype)")
    assert victim != ref
    with Judge(backend="cpu", store=tmp_path / "s.sqlite", timeout_s=120, use_cache=False) as j:
        res = j.evaluate(get_problem("softmax"), (here / "leave_default_device.py").read_text())
        assert res.status == "rejected" and "monkeypatch" in {f.rule for f in res.flags}, res.reason
        assert "default device 'cpu' -> 'meta'" in res.reason, res.reason
        after = j.evaluate(get_problem("softmax"), victim)
        assert after.status == "correct", after.reason


def test_a_problem_file_cannot_loosen_the_guard_for_the_problems_after_it(tmp_path):
    """Red team 18: a user's problem file (its module-level code runs unguarded in both workers) added
    'softmax' to the guard's tensor allowlist and the watcher's aten allowlist in the candidate worker, which was
    kept; a Tensor.softmax candidate on the built-in softmax after it scored correct. Wherever the problem
    changes and either is not a built-in, both workers are fresh."""
    here = Path(__file__).parent
    honest = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''
    cheat = ("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
             "def _touch(x_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n    tl.load(x_ptr + offs, mask=offs < n)\n\n\n"
             "class ModelNew(nn.Module):\n    def forward(self, x):\n        _touch[(1,)](x, 1, BLOCK=16)\n"
             "        sm = x.softmax\n        return sm(-1)\n")
    with Judge(backend="cpu", store=tmp_path / "s.sqlite", timeout_s=120, use_cache=False) as j:
        evil = Problem.from_file(here / "data" / "allowlist_loosening_problem.py")
        assert j.evaluate(evil, honest).status == "correct"
        res = j.evaluate(get_problem("softmax"), cheat)
        assert res.status == "rejected", (res.status, res.reason)
        # built-in after built-in keeps its workers (no restart between a GRPO group's samples)
        proc = j.cand.proc
        j.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
        assert j.cand.proc is proc


def test_the_watcher_knows_which_memory_the_call_made():
    """An output must be memory an op of the checked call allocated (red team 18: slots of a ring buffer kept in a
    list). Fresh: empty, clone, torch.tensor's data; not fresh: a view, an in-place op's or an out= return of
    memory made before the call."""
    import torch

    from megakernel_gym.rewards.sandbox import Inspector, LaunchCounter
    ring = torch.empty(4, 8)
    ins = Inspector(torch, LaunchCounter(torch))
    with torch.no_grad(), ins.mode:
        made = [torch.empty(3), ring.clone(), torch.tensor([1.0, 2.0]), torch.zeros(()).view(1)]
        kept = [ring[1], ring.view(32), ring[2].fill_(0.0), torch.add(ring[0], 1.0, out=ring[3])]
    assert all(t.untyped_storage().data_ptr() in ins.fresh for t in made)
    assert not any(t.untyped_storage().data_ptr() in ins.fresh for t in kept)


def test_a_triton_kernel_on_the_cpu_backend_touches_its_arguments_memory_alone():
    """triton_cpu.bound_memory (red team 23: under Triton's CPU interpreter a pointer is a host address, and a
    kernel that stored at id(math.e) changed the next candidate's verdict in the kept worker): each active lane of a
    load, store or atomic must lie within the storage of one of the launch's tensor arguments; masked lanes are
    not read; spans of views of one storage merge."""
    import numpy as np
    import torch

    from megakernel_gym.rewards.triton_cpu import Bounds
    a, b = torch.zeros(100), torch.zeros(8, dtype=torch.float64)
    bounds = Bounds()
    bounds.set_from(([a[10:20], (b,)], {"k": 3, "s": "x"}))
    pa, pb = a.data_ptr(), b.data_ptr()
    lanes = np.array([pa, pa + 4 * 99, pb, pb + 8 * 7], dtype=np.uint64)
    assert bounds.outside(lanes, None, 4) == 0 and bounds.outside(lanes[2:], None, 8) == 0
    assert bounds.outside(np.array([pa + 4 * 100], dtype=np.uint64), None, 4) == 1        # one past the end
    assert bounds.outside(np.array([pa + 4 * 99], dtype=np.uint64), None, 8) == 1         # its last bytes past it
    far = np.array([pa + 4 * 100, pa - 4, 16], dtype=np.uint64)
    assert bounds.outside(far, np.array([False, False, False]), 4) == 0                   # masked: not read
    assert bounds.outside(far, np.array([True, False, True]), 4) == 2
    empty = Bounds()
    empty.set_from([1, 2.0])
    assert empty.outside(lanes, None, 4) == 4


def test_triton_languages_functions_are_in_the_workers_integrity_snapshot(monkeypatch):
    """Red team 24: triton.language left patched with the interpreter's functions let host code compute with tl.load
    and tl.exp, for the candidate and every later one in the kept worker. tl's public functions are in the integrity
    snapshot: one replaced is a monkeypatch flag (and the worker is replaced)."""
    import torch
    import triton.language as tl

    from megakernel_gym.rewards import sandbox
    snap = sandbox._integrity_snapshot(torch)
    assert snap["tl.load"] is tl.load and sandbox._tampered(torch, snap) == []
    monkeypatch.setattr(tl, "load", lambda *a, **k: None)
    assert "tl.load" in sandbox._tampered(torch, snap)


def test_a_renamed_jit_module_or_a_swapped_numpy_function_is_in_the_integrity_snapshot(monkeypatch):
    """Red team 25: functools.wraps (as tl.math.wraps) in a kernel body renamed triton.language, so every later kernel
    in the kept worker was refused, and a kernel body slowed numpy.exp, which the interpreter computes with, for the
    next candidate. The names of the modules a jit body may name and numpy's functions are in the snapshot."""
    import numpy
    import torch
    import triton.language as tl

    from megakernel_gym.rewards import sandbox
    snap = sandbox._integrity_snapshot(torch)
    assert sandbox._tampered(torch, snap) == []
    monkeypatch.setattr(tl, "__name__", "_softmax_row_kernel")
    monkeypatch.setattr(numpy, "exp", lambda x: x)
    assert {"triton.language.__name__", "numpy.exp"} <= set(sandbox._tampered(torch, snap))
    monkeypatch.undo()
    assert sandbox._tampered(torch, snap) == []


def test_jit_body_paths_end_at_the_kernel_language():
    """Red team 25: a jit body named tl.str_to_ty (eval with the real builtins) and tl.math.wraps (functools.wraps):
    any public non-module name of triton.language passed. A path now ends at what a GPU compile takes as the kernel
    language; Triton's builtins, jit and constexpr functions, dtypes, enums and math stay."""
    import triton.language.extra.libdevice  # noqa: F401 - (imported by the candidate that names it)

    from megakernel_gym.rewards.jit_rules import _module_path_allowed
    for ok in ("triton.language.load", "triton.language.sum", "triton.language.float32", "triton.cdiv",
               "triton.next_power_of_2", "triton.language.constexpr", "triton.language.static_range",
               "triton.language.PropagateNan.ALL", "triton.language.pointer_type", "math.pi", "math.log2",
               "triton.language.extra.libdevice.exp", "triton.language.float32.primitive_bitwidth"):
        assert _module_path_allowed(ok), ok
    for bad in ("triton.language.str_to_ty", "triton.language.math.wraps", "triton.jit", "triton.autotune",
                "triton.Config", "triton.language.PropagateNan.__class__", "triton.compile"):
        assert not _module_path_allowed(bad), bad


_FRONT_END_SCRIPT = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from triton.runtime import interpreter
from megakernel_gym.rewards import triton_cpu
from megakernel_gym.rewards.triton_frontend import TritonCompilationError
triton_cpu.interpret_own_source(interpreter, triton_cpu.refusal)
bounds = triton_cpu.bound_memory(interpreter, triton_cpu.refusal)
triton_cpu.compile_before_running(interpreter, bounds)
sys.path.insert(0, sys.argv[1])
import kernels as k
core_before = dict(vars(tl.core))
x, y = torch.randn(4, 16), torch.zeros(4, 16)
k.helper_kernel[(4,)](x, y, 16, BLOCK=16, ACT=k.twice)
assert torch.allclose(y, 2 * x), "a helper and a jit function passed as a constexpr run"
changed = [n for n in set(core_before) | set(vars(tl.core)) if core_before.get(n) is not vars(tl.core).get(n)]
assert not changed, f"the interpreter's patches of triton.language outlived the launch: {changed[:5]}"
y.zero_()
try:
    k.reads_value[(4,)](x, y, 16, BLOCK=16)
    raise SystemExit("len(range(v)) ran")
except TritonCompilationError as e:
    assert "cannot be interpreted as an integer" in str(e), str(e)
assert not y.any(), "the refused kernel's body did not run"
k.ternary[(4,)](x, y, 16, BLOCK=16)
k.ternary[(4,)](x, y, 16, BLOCK=16)
assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6)
y.zero_()
try:
    k.split[(4,)](x, y, 16, BLOCK=16)
    raise SystemExit("the branch the front end did not compile ran")
except Exception as e:
    assert "comes out False under the interpreter" in str(e), str(e)
assert not y.any()
k.clamp[(4,)](x, y, 16, BLOCK=16)
assert torch.equal(y, x.clamp(min=0.0)), "max of a block is Triton's elementwise max"
for name, says in (("chain", "never reached"), ("union", "took as [False] comes out True"),
                   ("loop_else", "never reached"), ("iterations", "took as [True] comes out False")):
    y.zero_()
    try:
        getattr(k, name)[(4,)](x, y, 16, BLOCK=16)
        raise SystemExit(f"{name}: what the GPU compile did not compile ran")
    except Exception as e:
        assert says in str(e), f"{name}: {e}"
    assert not y[:, 0].any(), name     # (each kernel's store the GPU compile never compiled is at column 0)
k.two_specializations[(4,)](x, y, 16, BLOCK=16)
assert torch.equal(y, 2 * x), "one helper, two constexprs taking two branches"
y.zero_()
k.unrolled[(4,)](x, y, 16, BLOCK=16)
assert torch.allclose(y, x + 3.0), "a static_range loop whose iterations take different branches, and +="
print("ok")
'''

_FRONT_END_KERNELS = r'''
import triton
import triton.language as tl


@triton.jit
def twice(v):
    return v * 2.0


@triton.jit
def _load_row(x_ptr, row, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    return tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)


@triton.jit
def helper_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + row * n + offs, ACT(_load_row(x_ptr, row, n, BLOCK)), mask=offs < n)


@triton.jit
def reads_value(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    tl.store(y_ptr + row * n, 1.0)
    (b := len(range(tl.load(x_ptr + row * n).to(tl.int32, bitcast=True))))
    tl.store(y_ptr + row * n + 1, b * 1.0)


@triton.jit
def split(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if (c := 1) is not 1:
        pass
    else:
        tl.store(y_ptr + row * n, 5.0)


@triton.jit
def chain(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    (c := 1) is 1 is not tl.store(y_ptr + row * n, 5.0)


@triton.jit
def _either(v, y_ptr, K: tl.constexpr):
    (c := 1)
    # K to the front end (a walrus value is a tensor there, with no .real), 1 to the interpreter: a number, no
    # comparison, so only the record of each specialization tells the two calls apart
    if getattr(c, "real", K):
        tl.store(y_ptr, 5.0)
    return v * 1.0


@triton.jit
def union(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    d = _either(7, y_ptr + row * n + 1, 1)     # compiled with the store, and run with it
    tl.store(y_ptr + row * n + 2, _either(tl.load(x_ptr + row * n), y_ptr + row * n, 0) * 0.0)


@triton.jit
def loop_else(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for i in tl.static_range(1):
        pass
    else:
        row + 0
        tl.store(y_ptr + row * n, 5.0)


@triton.jit
def iterations(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for j in tl.static_range(2):
        (c := j)
        # 1 - j to the front end (a walrus value is a tensor there, with no .real), j to the interpreter: a number,
        # no comparison, so only the condition's record of each iteration tells them apart
        if getattr(c, "real", 1 - j):
            tl.store(y_ptr + row * n, 5.0)


@triton.jit
def unrolled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    for j in tl.static_range(3):
        if j == 0:
            acc += 1.0
        else:
            acc = acc + 1.0
    for i in range(0, 1):
        acc += i * 0.0
    tl.store(y_ptr + row * n + offs, acc, mask=offs < n)


@triton.jit
def _tile(x_ptr, y_ptr, offs, n, MASKED: tl.constexpr):
    if MASKED:
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)


@triton.jit
def two_specializations(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = row * n + tl.arange(0, BLOCK)
    if row % 2 == 0:
        _tile(x_ptr, y_ptr, offs, row * n + n, False)
    else:
        _tile(x_ptr, y_ptr, offs, row * n + n, True)


@triton.jit
def clamp(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + row * n + offs, max(x, 0.0), mask=offs < n)


@triton.jit
def ternary(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    m = tl.max(x, axis=0)
    e = tl.exp(x - (m if m > -float("inf") else 0.0))
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, axis=0), mask=offs < n)
'''


def test_a_launched_kernel_runs_under_the_interpreter_only_if_tritons_gpu_front_end_takes_it(tmp_path):
    """Red team 26: under Triton's CPU interpreter len(range(v)) and `A if v > t else B` read kernel values into
    Python, which a GPU compile refuses. Each launch's kernel goes through Triton's GPU front end first
    (triton_cpu.compile_before_running): len(range(v)) is refused before its body runs (nothing stored), a runtime
    ternary, a helper jit function and a jit function passed as a constexpr pass, and the interpreter's patches of
    triton.language made by a helper call inside a launch no longer outlive it (they made the front end, and every
    later launch in the worker, see the interpreter's language). Red team 27: a compile-time condition the
    interpreter decides otherwise than the front end (`(c := 1) is not 1`) is refused before the branch runs, and
    max of a block is Triton's elementwise max, as the front end takes it."""
    import os
    import subprocess
    import sys
    (tmp_path / "kernels.py").write_text(_FRONT_END_KERNELS)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _FRONT_END_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_a_tensor_descriptor_argument_addresses_its_own_tensors_storage_in_plain_ints():
    """Triton's host tensor descriptor is a kernel argument a candidate builds: its base must be a torch tensor
    (an object of its own would run its Python in Triton's argument copy, as red team 13's `stream=` did), its
    shape, strides and block shape plain ints, and what they address within the base's storage."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from megakernel_gym.rewards.launch_args import _descriptor_problem
    x = torch.randn(8, 64)
    assert _descriptor_problem(torch, x) is None and _descriptor_problem(torch, 3) is None
    assert _descriptor_problem(torch, TensorDescriptor.from_tensor(x, [1, 64])) == ""
    assert _descriptor_problem(torch, TensorDescriptor.from_tensor(x[2:], [1, 64])) == ""
    assert "reach past" in _descriptor_problem(torch, TensorDescriptor(x[2:], [8, 64], [64, 1], [1, 64]))
    assert "reach past" in _descriptor_problem(torch, TensorDescriptor(x[:1].clone(), [2, 64], [64, 1], [1, 64]))
    # (the wall is the storage, as the interpreter's memory bounds: a view's descriptor may cover its storage)
    assert _descriptor_problem(torch, TensorDescriptor(x[:1], [2, 64], [64, 1], [1, 64])) == ""

    class Base:   # what TensorDescriptor asks of its base, and nothing else
        dtype, shape = x.dtype, x.shape

        def data_ptr(self):
            return x.data_ptr()

        def stride(self):
            return x.stride()
    assert "not a tensor" in _descriptor_problem(torch, TensorDescriptor.from_tensor(Base(), [1, 64]))
    odd = TensorDescriptor.from_tensor(x, [1, 64])
    odd.shape = [8.0, 64]
    assert "lists of ints" in _descriptor_problem(torch, odd)
    odd.shape, odd.strides = [8, 64], [-64, 1]
    assert "do not describe" in _descriptor_problem(torch, odd)
    # a stride of 0 on the last dimension (red team 31: set through the candidate's own list after the descriptor
    # was made) kept the reach inside the storage, while a TMA load takes the last dimension as contiguous
    odd.shape, odd.strides = [8, 2 ** 20], [64, 0]
    assert "last dimension is contiguous" in _descriptor_problem(torch, odd)
