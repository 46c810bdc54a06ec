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

    from megakernel_gym.rewards import pool, ray_pool
    assert "GpuTurns()" in inspect.getsource(pool.LocalPool.__init__)
    assert "GpuTurns()" in inspect.getsource(ray_pool)
