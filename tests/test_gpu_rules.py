"""The judge's GPU-phase rules, driven with synthetic worker answers so they run on the CPU:
re-measurement of too-good results, the roofline floor, the wall-vs-event gap, re-checked
timed outputs and speedups against each baseline."""
import pytest

from megakernel_gym.curriculum import get_problem
from megakernel_gym.rewards import Candidate, Judge
from megakernel_gym.rewards.result import EvalResult

BASE = {"eager": {"median_ms": 1.0}, "cuda_graph": {"median_ms": 0.8}, "torch_compile": {"error": "no"}}


class FakeJudge(Judge):
    """A Judge whose workers answer from a script (no processes are started)."""

    def __init__(self, timings, recheck_ok=True, device="NVIDIA H200"):
        super().__init__(backend="cpu", store=False)
        self.backend, self.device = "gpu", device
        self.timings, self.calls, self.recheck_ok = list(timings), [], recheck_ok

    def _call_candidate(self, problem, cand, msg):
        self.calls.append(msg["cmd"])
        t = self.timings.pop(0)
        return {"ok": True, "status": "ran", "log": "", "timing": {"median_ms": t, "wall_median_ms": t + 0.02,
                                                                   "launch_hidden_us": 50.0, "samples": 30},
                "recheck": [{"k": k} for k in (4, 17, 23, 29)], "recheck_outputs": [[{"file": f"r{i}_0.bin"}] for i in range(4)]}

    def baselines(self, problem, specs=None):
        return BASE

    def compile_baselines(self, problem, specs=None):
        return None   # the baselines above are given: no reference worker (it compiled the problem on the CPU: ~8 s)

    def _compare(self, problem, specs, outputs, meta):
        return [{"ok": self.recheck_ok, "why": "differs"} for _ in specs]


def finish(j, meta=None):
    j._t, j._phases = 0.0, {}
    specs = j._specs(("scale", "shift"))
    return j._finish_gpu(get_problem("softmax"), Candidate("x"), specs, {}, meta or {"bytes": None}, [], "")


def test_speedups_against_each_baseline_and_the_best():
    r = finish(FakeJudge([0.4]))
    assert r.status == "correct"
    assert r.speedups == pytest.approx({"eager": 2.5, "cuda_graph": 2.0})
    assert r.speedup == pytest.approx(2.0)  # against the best baseline that ran
    assert r.timing["remeasured"] is False and r.flags == []


def test_too_good_is_timed_again_and_the_slower_run_kept():
    j = FakeJudge([0.05, 0.07])  # 16x over the best baseline
    r = finish(j)
    assert j.calls == ["time", "time"]
    assert r.timing["median_ms"] == 0.07 and r.timing["remeasured"] is True
    assert "suspicious_speedup" in {f.rule for f in r.flags}
    assert r.status == "correct"


def test_below_the_roofline_floor_is_rejected():
    # softmax's bytes on an H200: 64 MB / 4.8 TB/s = 13.7 us; 5 us is impossible
    r = finish(FakeJudge([0.005, 0.005]), meta={"bytes": 65.5e6})
    assert r.status == "rejected" and r.flags[0].rule == "impossible_speed"


def test_unknown_gpu_still_has_a_floor():
    r = finish(FakeJudge([0.001, 0.001], device="Some Future GPU"), meta={"bytes": 65.5e6})
    assert r.status == "rejected"


def test_wrong_timed_output_is_incorrect():
    r = finish(FakeJudge([0.4], recheck_ok=False))
    assert r.status == "incorrect" and r.category == "timed_mismatch"


def test_wall_clock_gap_is_rejected():
    class Escaping(FakeJudge):
        def _call_candidate(self, problem, cand, msg):
            h = super()._call_candidate(problem, cand, msg)
            h["timing"]["wall_median_ms"] = 5.0  # the host waited far longer than the events measured
            return h
    j = Escaping([0.4, 0.4])
    r = finish(j)
    assert r.status == "rejected" and r.flags[0].rule == "escaped_timing"
    assert j.calls == ["time", "time"] and r.timing["remeasured"]       # timed twice: it showed both times


def test_a_host_busy_for_one_timing_run_is_not_a_cheat():
    """A wall-clock gap on one run alone is contention (the other slots' compiles), not an escape:
    the judge times again and keeps the clean run."""
    class BusyOnce(FakeJudge):
        def _call_candidate(self, problem, cand, msg):
            h = super()._call_candidate(problem, cand, msg)
            if len(self.calls) == 1:
                h["timing"]["wall_median_ms"] = 5.0
            return h
    j = BusyOnce([0.4, 0.41])
    r = finish(j)
    assert r.status == "correct" and j.calls == ["time", "time"] and r.timing["median_ms"] == 0.41


def test_a_recheck_list_that_is_not_a_sample_of_the_timed_calls_is_refused():
    """The worker reports which timed calls it kept: RECHECKED distinct calls of those it made and the last. Any
    other list (the last call missing, an index past the calls made, too few) is code past the guard at work."""
    for bad in ([3, 17, 23], [3, 17, 23, 29, 40], [29], [3, 3, 17, 29]):
        class Forged(FakeJudge):
            def _call_candidate(self, problem, cand, msg, bad=bad):
                h = super()._call_candidate(problem, cand, msg)
                h["recheck"] = [{"k": k} for k in bad]
                return h
        r = finish(Forged([0.4]))
        assert r.status == "rejected" and "not a sample" in r.reason, (bad, r.reason)
    assert finish(FakeJudge([0.4])).status == "correct"


def test_failure_in_the_timing_phase_is_returned():
    class Crashing(FakeJudge):
        def _call_candidate(self, problem, cand, msg):
            return EvalResult(status="runtime_error", reason="boom", problem="softmax", backend="gpu",
                              candidate_sha256="x", category="crash")
    r = finish(Crashing([]))
    assert r.status == "runtime_error" and r.category == "crash"


def test_every_timed_call_gets_inputs_of_its_own_and_a_secret_sample_is_rechecked():
    """No timed call repeats a checked seed's inputs or another timed call's, on problems without a scale
    transform too: an output cache keyed by input values never hits. The re-checked calls are a secret
    sample, drawn anew for each timing run."""
    from megakernel_gym.rewards.sandbox import timed_spec

    class Recording(FakeJudge):
        def _call_candidate(self, problem, cand, msg):
            self.msgs = getattr(self, "msgs", []) + [msg]
            h = super()._call_candidate(problem, cand, msg)
            return h

        def _compare(self, problem, specs, outputs, meta):
            self.compared = specs
            return super()._compare(problem, specs, outputs, meta)
    j = Recording([0.4, 0.4])
    j._t, j._phases = 0.0, {}
    specs = j._specs(())          # a problem that allows no input transform at all
    r = j._finish_gpu(get_problem("softmax"), Candidate("x"), specs, {}, {"bytes": None}, [], "")
    assert r.status == "correct", r.reason
    msg = j.msgs[0]
    timed = [timed_spec(msg["fresh"], k) for k in range(-3, 300)]
    seeds = {t["seed"] for t in timed}
    assert len(seeds) == len(timed) and not seeds & {s["seed"] for s in specs}
    assert [s["seed"] for s in j.compared] == [timed_spec(msg["fresh"], k)["seed"] for k in (4, 17, 23, 29)]
    assert msg["sample"] == 3 and "keep_at" not in msg     # drawn by the worker over every timed call (timing.py)
    again = Recording([0.4])
    again._t, again._phases = 0.0, {}
    again._finish_gpu(get_problem("softmax"), Candidate("x"), specs, {}, {"bytes": None}, [], "")
    assert again.msgs[0]["fresh"]["seed"] != msg["fresh"]["seed"]


def test_kernels_the_judge_did_not_compile_are_foreign():
    """GPU accounting by name: the candidate's own kernels (by their function's identifier), the kernels of
    allowed calls (fill, copy, cat, arange) and nothing else; a vendor kernel never passes as the candidate's
    even when the candidate names a kernel `gemm`."""
    from megakernel_gym.rewards.kernel_accounting import classify_kernels
    own = {"_softmax_rows", "gemm"}
    ran = ["_softmax_rows",
           "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
           "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
           "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
           "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}> >"
           "(int, at::native::gpu_kernel_impl_nocast<...>)",
           "spin_kernel(long)", "at::cuda::spin_kernel(long)",
           "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
           "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off",
           "void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda(at::TensorIteratorBase&)"
           "::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)"]
    library, foreign = classify_kernels(ran, own)
    assert library == [ran[6]]
    assert foreign == [ran[5], ran[7]]
    # a candidate's own no-op kernel named like one of aten's excuses none of aten's (its namespace tells)
    _, foreign = classify_kernels(ran, own | {"vectorized_elementwise_kernel", "cunn_SoftMaxForward"})
    assert foreign == [ran[5], ran[7]]
