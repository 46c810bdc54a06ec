"""rewards/gpu_turns.py: timing holds a GPU alone; a candidate's checked calls, the reference's work and the
baselines' compile hold it beside each other, never beside a timing (red team 19: a candidate whose checked
calls kept every SM busy slowed the timings of the judges beside it)."""
import threading
import time

from megakernel_gym.rewards import Judge
from megakernel_gym.rewards.gpu_turns import GpuTurns, shared_turn


def _started(target):
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_a_timing_waits_for_the_work_running_and_new_work_waits_for_it():
    turns, log = GpuTurns(), []
    with turns.shared(), turns.shared():          # two judges' checked calls at once
        def timing():
            with turns:
                log.append("timing")
                time.sleep(0.2)
                log.append("timed")
        t = _started(timing)
        time.sleep(0.1)
        assert log == []                           # not while checked calls run

    def checking():
        with turns.shared():
            log.append("checked")
    c = _started(checking)
    t.join(2)
    c.join(2)
    assert log == ["timing", "timed", "checked"]   # the checks that came while it waited waited for it


def test_the_timing_judges_own_work_passes_through_and_a_plain_lock_still_works():
    turns = GpuTurns()
    with turns:
        done = []
        with turns.shared():                       # the timing's re-check compares, on its own thread
            done.append(1)
        assert done == [1]
    lock = threading.Lock()
    with lock, shared_turn(lock):                 # (a judge given a plain lock: no shared turns)
        pass


def test_judges_and_pools_take_turns():
    j = Judge("cpu", store=False)
    assert isinstance(j.gpu_lock, GpuTurns)
    import inspect

    from megakernel_gym.rewards import megakernel, pool, ray_pool
    assert "GpuTurns(gpu_key(g))" in inspect.getsource(pool.LocalPool.__init__)     # (GPU-only paths: read)
    assert "GpuTurns(gpu_key(0)" in inspect.getsource(ray_pool)
    assert "GpuTurns(gpu_key(" in inspect.getsource(megakernel._worker)             # the level-5 judge's worker


_CHILD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("gpu_turns", {path!r})
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
turns, log = m.GpuTurns("7", folder={folder!r}), open({log!r}, "a", buffering=1)
log.write("{name} want %f\\n" % time.time())
with (turns if "{kind}" == "exclusive" else turns.shared()):
    log.write("{name} got %f\\n" % time.time())
    time.sleep({hold})
    log.write("{name} done %f\\n" % time.time())
"""


def _child(tmp_path, name, kind, hold):
    import subprocess
    import sys

    from megakernel_gym.rewards import gpu_turns
    code = _CHILD.format(path=gpu_turns.__file__, folder=str(tmp_path / "turns"), log=str(tmp_path / "log"),
                         name=name, kind=kind, hold=hold)
    return subprocess.Popen([sys.executable, "-c", code])


def _events(tmp_path):
    p = tmp_path / "log"
    return [tuple(line.split()[:2]) for line in p.read_text().splitlines()] if p.exists() else []


def _wait_for(tmp_path, event, timeout=20.0):
    t0 = time.time()
    while event not in _events(tmp_path):
        assert time.time() - t0 < timeout, (event, _events(tmp_path))
        time.sleep(0.02)


def test_turns_hold_across_processes_and_a_waiting_timing_holds_new_work_back(tmp_path):
    """Judges in other processes on one GPU (environments with a judge each, the level-5 judge's worker) took no
    turns with each other: the turns are file locks per GPU as well. A timing in another process waits for this
    process's checked calls; checked calls that come while it waits wait for it, in any process."""
    turns = GpuTurns("7", folder=str(tmp_path / "turns"))
    with turns.shared():                                   # this process's checked calls
        timing = _child(tmp_path, "timing", "exclusive", 0.5)
        _wait_for(tmp_path, ("timing", "want"))
        time.sleep(0.3)
        assert ("timing", "got") not in _events(tmp_path)  # not beside them
        checking = _child(tmp_path, "checking", "shared", 0.0)
        _wait_for(tmp_path, ("checking", "want"))
        time.sleep(0.3)
    assert timing.wait(20) == 0 and checking.wait(20) == 0
    order = [e for e in _events(tmp_path) if e[1] != "want"]
    assert order == [("timing", "got"), ("timing", "done"), ("checking", "got"), ("checking", "done")], order
    with turns:                                            # and this process's timing holds the other's checks off
        checking = _child(tmp_path, "late", "shared", 0.0)
        _wait_for(tmp_path, ("late", "want"))
        time.sleep(0.3)
        assert ("late", "got") not in _events(tmp_path)
    assert checking.wait(20) == 0 and ("late", "got") in _events(tmp_path)


def test_which_gpu_a_process_means(monkeypatch):
    """gpu_key names a device as every process on the host does: through CUDA_VISIBLE_DEVICES."""
    from megakernel_gym.rewards.gpu_turns import gpu_key
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_key(0) == "0" and gpu_key(3) == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert gpu_key(0) == "2" and gpu_key(1) == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f/../x")
    assert gpu_key(0) == "GPU-8f_.._x"
    with Judge("cpu", store=False) as j:                    # a cpu judge takes no files
        assert j.gpu_lock.device is None
