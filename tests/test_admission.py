"""Admission by memory (issue 41, item 2): evaluations sharing a GPU hold its memory in turn, never more
than it has between them; one that needs more than the whole GPU runs alone; first come, first served."""
import random
import threading
import time

import pytest

from megakernel_gym.rewards.admission import GIB, MARGIN, GpuMemory, gpu_need, host_budget, host_need


def test_the_need_counts_the_busiest_phase_and_the_other_workers_resident_model():
    fp = {"inputs": 1 * GIB, "params": 2 * GIB, "outputs": 1 * GIB}
    assert gpu_need(fp) == int(MARGIN * (3 * 1 + 5 * 1 + 3 * 2) * GIB)
    assert gpu_need(None) == 0 and gpu_need({}) == 0


def test_the_result_channel_is_counted_in_the_hosts_shared_memory():
    """Each seed's outputs, or two timing calls' re-checked ones, sit in /dev/shm until compared: a pool's
    slots share the host's memory as a GPU's share its memory (KernelBench's 8 GiB norms: 96 GiB each)."""
    from megakernel_gym.rewards.judge import CHANNEL_FILES, FIXED_SEEDS, RECHECKED
    assert CHANNEL_FILES == max(len(FIXED_SEEDS) + 1, 3 * (RECHECKED + 1)) == 12   # three timing calls at most
    assert host_need({"inputs": 5, "params": 7, "outputs": 3 * GIB}, CHANNEL_FILES) == 36 * GIB
    assert host_need(None, CHANNEL_FILES) == 0
    mem = host_budget()
    assert GIB <= mem.capacity and mem.name.startswith("host ")
    assert host_budget("/no/such/folder").capacity >= GIB     # falls back to the host's available memory


def _start(mem, need, log, name, hold_s=0.2, started=None):
    def run():
        with mem.hold(need) as taken:
            log.append(("in", name, taken, mem.used))
            if started:
                started.set()
            time.sleep(hold_s)
        log.append(("out", name))
    t = threading.Thread(target=run)
    t.start()
    return t


def test_two_that_do_not_fit_together_take_turns():
    mem, log = GpuMemory(10 * GIB), []
    first = threading.Event()
    a = _start(mem, 6 * GIB, log, "a", started=first)
    first.wait(5)
    b = _start(mem, 6 * GIB, log, "b")
    a.join(), b.join()
    assert [e[:2] for e in log] == [("in", "a"), ("out", "a"), ("in", "b"), ("out", "b")]
    assert mem.peak == 6 * GIB and mem.used == 0 and mem.running == 0
    # two that fit run side by side
    mem2, log2 = GpuMemory(10 * GIB), []
    ts = [_start(mem2, 4 * GIB, log2, n, hold_s=0.3) for n in "xy"]
    for t in ts:
        t.join()
    assert mem2.peak == 8 * GIB and [e[0] for e in log2][:2] == ["in", "in"]


def test_one_larger_than_the_gpu_runs_alone_and_in_its_turn():
    mem, log = GpuMemory(10 * GIB), []
    small_in = threading.Event()
    s1 = _start(mem, 1 * GIB, log, "s1", hold_s=0.3, started=small_in)
    small_in.wait(5)
    big = _start(mem, 40 * GIB, log, "big", hold_s=0.3)
    time.sleep(0.05)
    s2 = _start(mem, 1 * GIB, log, "s2", hold_s=0.1)    # after the big one: it waits behind it
    for t in (s1, big, s2):
        t.join()
    order = [e[:2] for e in log]
    assert order.index(("out", "s1")) < order.index(("in", "big")) < order.index(("out", "big")) \
        < order.index(("in", "s2"))
    big_in = next(e for e in log if e[:2] == ("in", "big"))
    assert big_in[2] == mem.capacity and big_in[3] == mem.capacity    # it holds the whole GPU, alone
    assert not mem.alone and mem.used == 0


def test_nothing_unknown_slips_in_beside_one_that_runs_alone():
    mem, log = GpuMemory(10 * GIB), []
    big_in = threading.Event()
    big = _start(mem, 40 * GIB, log, "big", hold_s=0.3, started=big_in)
    big_in.wait(5)
    zero = _start(mem, 0, log, "zero", hold_s=0.05)      # a problem whose footprint is unknown
    big.join(), zero.join()
    assert [e[:2] for e in log] == [("in", "big"), ("out", "big"), ("in", "zero"), ("out", "zero")]


def test_a_wait_past_its_timeout_says_what_it_waited_for():
    mem = GpuMemory(10 * GIB, name="cuda:0")
    with mem.hold(8 * GIB):
        with pytest.raises(TimeoutError, match=r"cuda:0: waited 0 s for 4.00 GiB \(8.00 of 10.00 GiB held\)"):
            with mem.hold(4 * GIB, timeout=0.1):
                pass
    with mem.hold(4 * GIB):          # the one that timed out left the queue
        assert mem.used == 4 * GIB
    with pytest.raises(ValueError, match="must be positive"):
        GpuMemory(0)


def test_many_holders_never_exceed_the_gpu():
    mem = GpuMemory(16 * GIB)
    bad = []
    rng = random.Random(0)
    sizes = [rng.choice([0, 1, 3, 7, 12, 20]) * GIB for _ in range(160)]

    def worker(chunk):
        for need in chunk:
            with mem.hold(need) as taken:
                if mem.used > mem.capacity or (mem.alone and mem.running != 1):
                    bad.append((need, mem.used, mem.running))
                time.sleep(0.001 * (taken // GIB))
    ts = [threading.Thread(target=worker, args=(sizes[i::8],)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad and mem.used == 0 and mem.running == 0 and mem.peak <= mem.capacity


def test_a_judge_holds_what_its_problem_needs_while_it_runs(store_path):
    """Through a real (cpu) judge: the evaluation holds gpu_need(footprint) of the budget, sized on the
    meta device before the reference runs; a budget smaller than the need still judges it, alone."""
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    problem = get_problem("softmax")
    answer = reference_candidates("softmax")["triton"]
    mem = GpuMemory(64 * GIB)
    with Judge(backend="cpu", store=False, memory=mem) as j:
        r = j.evaluate(problem, answer)
        assert r.status == "correct", r.reason
        fp = j._meta[problem.sha256]["footprint"]
        assert fp and fp["inputs"] > 0 and fp["outputs"] > 0
        assert mem.peak == gpu_need(fp) > 0 and mem.used == 0
        assert "wait_memory" in r.phases
        j.memory = small = GpuMemory(1)
        assert j.evaluate(problem, answer).status == "correct"
        assert small.peak == small.capacity and not small.alone


def test_judges_sharing_a_gpu_take_turns_when_their_needs_do_not_fit(store_path):
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    problem = get_problem("softmax")
    answer = reference_candidates("softmax")["triton"]
    judges = [Judge(backend="cpu", store=False) for _ in range(2)]
    try:
        for j in judges:
            j.evaluate(problem, answer)          # warm, and learn the need
        need = gpu_need(judges[0]._meta[problem.sha256]["footprint"])
        mem = GpuMemory(need + need // 2)        # one fits, two do not
        spans = []
        for j in judges:
            j.memory = mem

        def run(j):
            t0 = time.monotonic()
            assert j.evaluate(problem, answer).status == "correct"
            spans.append((t0, time.monotonic()))
        ts = [threading.Thread(target=run, args=(j,)) for j in judges]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(spans) == 2 and mem.peak == need and mem.used == 0
    finally:
        for j in judges:
            j.close()


def test_an_evaluation_holds_the_channels_host_memory_and_leaves_the_channel_empty(store_path):
    """The host budget is held with the GPU's (in that order), and no file of the evaluation stays in the
    candidate's channel afterwards, passed or failed: the next evaluation on the slot starts from an
    empty /dev/shm share."""
    import os

    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    from megakernel_gym.rewards.judge import CHANNEL_FILES
    problem = get_problem("softmax")
    answer = reference_candidates("softmax")["triton"]
    host = GpuMemory(64 * GIB, name="host test")
    with Judge(backend="cpu", store=False, memory=GpuMemory(64 * GIB), host_memory=host) as j:
        assert j.evaluate(problem, answer).status == "correct"
        fp = j._meta[problem.sha256]["footprint"]
        assert host.peak == host_need(fp, CHANNEL_FILES) > 0 and host.used == 0
        assert os.listdir(j.cand.channel) == []
        wrong = answer.source.replace("        return y\n", "        return y[:, :1]\n")
        assert wrong != answer.source
        r = j.evaluate(problem, wrong)
        assert r.status == "incorrect" and "shape" in r.reason, r.reason
        assert os.listdir(j.cand.channel) == [] and host.used == 0


def test_a_measured_peak_raises_a_problems_need_and_never_lowers_it():
    """The footprint misses intermediates (a convolution's workspace: KernelBench's convolutions peaked at
    up to 4x gpu_need). The reference worker's measured peak is learned per problem by its GPU's memory,
    and the evaluations after it hold the larger of the two; a smaller measurement changes nothing."""
    from megakernel_gym.rewards.admission import measured_need
    mem = GpuMemory(100 * GIB)
    assert mem.need("p", 2 * GIB) == 2 * GIB
    mem.learn("p", measured_need(8 * GIB, {"inputs": 0, "params": GIB, "outputs": 0}))
    assert mem.need("p", 2 * GIB) == int(MARGIN * 8 * GIB) + GIB
    mem.learn("p", GIB)
    assert mem.need("p", 2 * GIB) == int(MARGIN * 8 * GIB) + GIB and mem.need("q", 2 * GIB) == 2 * GIB
    assert mem.need("p", 50 * GIB) == 50 * GIB
    # a pool's GPUs share one table (admission.gpu_budgets): the baselines run on one of them, once
    table, lock = {}, threading.Lock()
    a, b = (GpuMemory(100 * GIB, name=n, learned=table, learned_lock=lock) for n in ("cuda:0", "cuda:1"))
    a.learn("p", 9 * GIB)
    assert b.need("p", GIB) == 9 * GIB


def test_a_judge_holds_the_learned_need_of_a_problem(store_path):
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    problem = get_problem("softmax")
    mem = GpuMemory(64 * GIB)
    mem.learn(problem.sha256, 3 * GIB)        # as Judge.baselines does from the reference worker's peak
    with Judge(backend="cpu", store=False, memory=mem) as j:
        assert j.evaluate(problem, reference_candidates("softmax")["triton"]).status == "correct"
        assert mem.peak == 3 * GIB > gpu_need(j._meta[problem.sha256]["footprint"]) and mem.used == 0
        assert j.prepare(problem)["need"] == 3 * GIB


def test_a_candidate_worker_whose_folder_passes_its_bound_is_replaced_after_the_evaluation(monkeypatch):
    """The candidate owns its folder in /dev/shm, which no budget counts: files it leaves there would hold
    the host's memory across evaluations. Past judge.WORKER_FOLDER_BYTES the worker (and its folder) is
    replaced once the evaluation ends; an honest worker under the bound is kept from one evaluation to
    the next."""
    import os

    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    from megakernel_gym.rewards import judge as judge_mod
    problem, answer = get_problem("softmax"), reference_candidates("softmax")["triton"]
    with Judge(backend="cpu", store=False) as j:
        assert j.evaluate(problem, answer).status == "correct"
        pid, folder = j.cand.proc.pid, j.cand.workdir
        assert 0 < j.cand.folder_bytes() < judge_mod.WORKER_FOLDER_BYTES
        assert j.evaluate(problem, answer).status == "correct" and j.cand.proc.pid == pid   # kept
        os.makedirs(os.path.join(folder, "tmp", "junk"), exist_ok=True)
        with open(os.path.join(folder, "tmp", "junk", "fill.bin"), "wb") as f:
            f.write(os.urandom(4 << 20))        # what a candidate could leave behind
        monkeypatch.setattr(judge_mod, "WORKER_FOLDER_BYTES", 2 << 20)
        assert j.evaluate(problem, answer).status == "correct"
        assert not os.path.exists(folder) and (j.cand.proc is None or j.cand.proc.pid != pid)
        monkeypatch.undo()
        assert j.evaluate(problem, answer).status == "correct"                       # a fresh worker


def test_a_measured_peak_is_kept_in_the_store_for_the_pools_after(tmp_path):
    """A problem's measured peak goes into the results store with its baselines (ResultsStore.put_peak),
    and a judge of a later pool teaches its GPU's budget from it before its first evaluation of the
    problem holds memory: the need does not fall back to the footprint's estimate once the baselines
    are stored."""
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    from megakernel_gym.rewards.admission import measured_need
    from megakernel_gym.rewards.store import ResultsStore
    problem = get_problem("softmax")
    store = ResultsStore(tmp_path / "r.sqlite")
    mem = GpuMemory(64 * GIB)
    with Judge(backend="cpu", store=store, memory=mem, use_cache=False) as j:
        key, software = j._store_key()
        assert store.get_peak(problem.sha256, key, software) is None
        store.put_peak(problem.sha256, key, software, 2 * GIB)     # what a GPU pool's baselines measured
        assert j.evaluate(problem, reference_candidates("softmax")["triton"]).status == "correct"
        fp = j._meta[problem.sha256]["footprint"]
        assert mem.peak == measured_need(2 * GIB, fp) > gpu_need(fp)
    assert store.get_peak(problem.sha256, key, software) == 2 * GIB


def test_a_candidate_worker_releases_the_model_it_kept_for_timing(monkeypatch):
    """On a GPU the candidate worker keeps its model between the candidate and time commands; when the
    evaluation ends the judge sends `release`, so that an idle slot holds only its contexts (what
    gpu_budgets reserves). A worker that does not answer is replaced. (The release is sent on the gpu
    backend; the command itself is the same on every backend.)"""
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards import Judge
    from megakernel_gym.rewards.workers import WorkerTimeout
    problem, answer = get_problem("softmax"), reference_candidates("softmax")["triton"]
    with Judge(backend="cpu", store=False) as j:
        assert j.evaluate(problem, answer).status == "correct"
        pid = j.cand.proc.pid
        assert j.cand.call({"cmd": "release"}, timeout=30) == {"ok": True}
        assert j.cand.call({"cmd": "release"}, timeout=30) == {"ok": True}   # nothing kept: still an answer
        j._release_candidate()
        assert j.cand.proc.pid == pid                       # answered: kept
        assert j.ref.call({"cmd": "release"}, timeout=30)["error"] == "bad_command"   # a candidate command

        def hang(msg, timeout=None):
            raise WorkerTimeout("no answer")
        monkeypatch.setattr(j.cand, "call", hang)
        j._release_candidate()
        assert j.cand.proc is None                          # replaced at the next command
        monkeypatch.undo()
        assert j.evaluate(problem, answer).status == "correct"
