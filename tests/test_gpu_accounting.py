"""GPU-side accounting with the Python layers gone (static rules and the run-time guard off): whatever
the candidate's process does, every kernel that ran during a checked or a timed call is one the judge
compiled from the candidate's source or one an allowed call launched, and no timed call repeats inputs.
Each exploit has an honest neighbour that must stay correct."""
import pytest

from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.rewards import Candidate, Judge

pytestmark = pytest.mark.gpu

SOFTMAX = reference_candidates("softmax")["triton"].source


def patched(*pairs) -> Candidate:
    src = SOFTMAX
    for old, new in pairs:
        assert old in src, old
        src = src.replace(old, new, 1)
    return Candidate(src)


@pytest.fixture(scope="module")
def bare_judge(tmp_path_factory):
    j = Judge("gpu", store=tmp_path_factory.mktemp("acct") / "r.sqlite", use_cache=False, static_checks=False,
              python_guard=False, timeout_s=120)
    yield j
    j.close()


def test_honest_triton_stays_correct_with_every_call_accounted(bare_judge):
    r = bare_judge.evaluate(get_problem("softmax"), reference_candidates("softmax")["triton"])
    assert r.status == "correct", r.reason


def test_honest_while_checked_torch_while_timed_is_foreign(bare_judge):
    """Family 6 of issue 38: the first six calls (the checked ones) run the honest kernel, every later one
    torch.softmax; the timing session sees aten's softmax kernel."""
    c = patched(("        super().__init__()", "        super().__init__()\n        self.calls = 0"),
                ("        n_cols = x.shape[-1]", "        self.calls += 1\n        if self.calls > 6:\n"
                 "            return torch.softmax(x, -1)\n        n_cols = x.shape[-1]"))
    r = bare_judge.evaluate(get_problem("softmax"), c)
    assert r.status == "rejected" and "foreign_kernel" in {f.rule for f in r.flags}, (r.status, r.reason)


def test_torch_compute_with_the_watcher_switched_off_is_foreign(bare_judge):
    """Family 1: the aten-op watcher is switched off from inside forward; the GPU still ran aten's kernel."""
    c = patched(("        n_cols = x.shape[-1]", "        from torch.utils._python_dispatch import _disable_current_modes\n"
                 "        with _disable_current_modes():\n            return torch.softmax(x, -1)\n"
                 "        n_cols = x.shape[-1]"))
    r = bare_judge.evaluate(get_problem("softmax"), c)
    assert r.status == "rejected" and "foreign_kernel" in {f.rule for f in r.flags}, (r.status, r.reason)


def test_torch_compute_on_a_thread_is_foreign(bare_judge):
    """Family 2: the dispatch watcher is per thread; CUPTI sees every thread's kernels."""
    c = patched(("        n_cols = x.shape[-1]", "        import threading\n        box = []\n"
                 "        t = threading.Thread(target=lambda: box.append(torch.softmax(x, -1)))\n"
                 "        t.start()\n        t.join()\n        torch.cuda.synchronize()\n        return box[0]\n"
                 "        n_cols = x.shape[-1]"))
    r = bare_judge.evaluate(get_problem("softmax"), c)
    assert r.status == "rejected" and {"foreign_kernel", "concurrency"} & {f.rule for f in r.flags}, \
        (r.status, r.reason)


def test_matmul_by_cublas_is_a_library_kernel(bare_judge):
    """cuBLAS behind torch's linear, with the watcher switched off: a vendor kernel ran."""
    src = reference_candidates("matmul_bias_relu")["triton"].source
    old = "        w = self.linear.weight\n"
    assert old in src
    c = Candidate(src.replace(old, old + "        from torch.utils._python_dispatch import _disable_current_modes\n"
                              "        with _disable_current_modes():\n"
                              "            return torch.relu(self.linear(x))\n", 1))
    r = bare_judge.evaluate(get_problem("matmul_bias_relu"), c)
    assert r.status == "rejected" and {"forbidden_library", "foreign_kernel"} & {f.rule for f in r.flags}, \
        (r.status, r.reason)


def test_an_output_cache_keyed_by_input_values_never_hits(bare_judge):
    """Family: outputs cached by a checksum of the inputs (computed by the candidate's own kernel, so it
    launches nothing foreign). Timed calls get inputs of their own, so the cache only ever misses; a
    cache keyed by shape returns stale outputs and the re-check catches them."""
    c = patched(("        super().__init__()", "        super().__init__()\n        self.cache = {}"),
                ("        n_cols = x.shape[-1]", "        key = tuple(x.shape)\n"
                 "        if key in self.cache and len(self.cache) > 0 and getattr(self, 'armed', 0) > 6:\n"
                 "            return self.cache[key]\n        self.armed = getattr(self, 'armed', 0) + 1\n"
                 "        n_cols = x.shape[-1]"),
                ("        return y", "        self.cache[tuple(x.shape)] = y\n        return y"))
    r = bare_judge.evaluate(get_problem("softmax"), c)
    assert r.status == "incorrect" and r.category == "timed_mismatch", (r.status, r.reason)


def test_the_layers_report_on_the_gpu(bare_judge):
    bare_judge.warm()
    iso = bare_judge.cand.info.get("isolation", "")
    assert iso.startswith("pid"), iso
