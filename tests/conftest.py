import re
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"


def pytest_collection_modifyitems(config, items):
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device; results in bench/results/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def read_expectation(path: Path) -> dict:
    """The corpus header: `# expect: STATUS [CATEGORY_OR_RULE]`, where the gpu backend's verdict differs
    `# expect-gpu: STATUS [CATEGORY_OR_RULE]` (its "gpu" entry), and `# problem: NAME`."""
    text = path.read_text()
    m = re.search(r"^# expect: (\w+)(?: (\w+))?", text, re.M)
    g = re.search(r"^# expect-gpu: (\w+)(?: (\w+))?", text, re.M)
    p = re.search(r"^# problem: (\S+)", text, re.M)
    return {"status": m.group(1), "detail": m.group(2), "problem": p.group(1) if p else "softmax",
            "source": text, "gpu": {"status": g.group(1), "detail": g.group(2)} if g else None}


def problem_for(exp: dict):
    """A built-in name, or a path (ending in .py) relative to tests/."""
    from megakernel_gym.curriculum import get_problem
    from megakernel_gym.rewards import Problem
    name = exp["problem"]
    return Problem.from_file(HERE / name) if name.endswith(".py") else get_problem(name)


@pytest.fixture(scope="session")
def store_path(tmp_path_factory):
    return tmp_path_factory.mktemp("store") / "results.sqlite"


@pytest.fixture(scope="session")
def cpu_judge(store_path):
    from megakernel_gym.rewards import Judge
    j = Judge(backend="cpu", store=store_path, timeout_s=120, use_cache=False)
    yield j
    j.close()


@pytest.fixture(scope="session", autouse=True)
def _judge_servers(tmp_path_factory):
    """`mkgym judge` starts judge servers that outlive the command (rewards/judge_server.py): the tests'
    live in a directory of this session's, leave when idle, and are stopped when the session ends."""
    with pytest.MonkeyPatch.context() as mp:   # the session's: the function-scoped fixture cannot serve it
        mp.setenv("MKGYM_RUN_DIR", str(tmp_path_factory.mktemp("run")))
        mp.setenv("MKGYM_JUDGE_IDLE", "120")
        # every judge makes (and covers) each folder a server may use, the user cache's among them
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg_cache")))
        yield
        from megakernel_gym.rewards import judge_server
        judge_server.stop_all()


@pytest.fixture(autouse=True)
def _no_user_cache(tmp_path_factory, monkeypatch):
    # never touch the real user cache dir from tests
    monkeypatch.setenv("MKGYM_CUDA_CACHE", str(tmp_path_factory.getbasetemp() / "cubin"))
    monkeypatch.setenv("MKGYM_GRAPH_CACHE", str(tmp_path_factory.getbasetemp() / "graphs"))


TINY_MODELS = ["llama-tiny", "mlp-tiny", "attention-tiny"]


@pytest.fixture(scope="session")
def graphs():
    """The tiny zoo models captured once per test session: {name: Graph}."""
    from megakernel_gym.compiler import ZOO, capture
    out = {}
    for name in TINY_MODELS:
        m, inputs = ZOO[name]()
        out[name] = capture(m, inputs, name)
    return out


def seeded_step(name: str, seed: int):
    """A tiny zoo model at one seed, captured, with what a megakernel of it is checked against:
    (graph, params, feeds, the graph run by the reference interpreter)."""
    from megakernel_gym.compiler import ZOO, capture, module_tensors, run_graph
    model, inputs = ZOO[name](seed=seed)
    g = capture(model, inputs, name)
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    return g, params, feeds, run_graph(g, params, feeds)


def expert_plan(g, num_sms: int = 8, extra: str = ""):
    """A graph's expert plan on `num_sms` SMs (`extra` edits after the expert's)."""
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    ir = make_ir(g, num_sms=num_sms)
    return apply_edits(ir, expert_edits(ir) + ("\n" + extra if extra else "")).plan()


def expert_1b(seed: int, extra: str = "", levers: tuple[str, ...] | None = None):
    """The 1B model's expert plan on this GPU's SMs (only `levers`, where given; `extra` edits after
    it), with its parameters and inputs at `seed` on the GPU: (plan, params, feeds)."""
    import torch
    from megakernel_gym.compiler import ZOO, capture, module_tensors
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import LEVERS, expert_edits
    g = capture(*ZOO["llama-1b"](device="meta"), "llama-1b")
    base = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    model, inputs = ZOO["llama-1b"](seed=seed, device="cuda")
    text = expert_edits(base, levers=levers or LEVERS) + ("\n" + extra if extra else "")
    return apply_edits(base, text).plan(), module_tensors(model), dict(zip(g.inputs, inputs))


def assert_same_bits(plan, params, feeds, runs: int = 3, **knobs):
    """The plan built with these emit_cuda knobs (`runs` poisoned runs) and with the defaults (one):
    every output finite and the same, bit for bit."""
    import torch
    _, got = built_runs(plan, params, feeds, runs, **knobs)
    _, want = built_runs(plan, params, feeds, 1)
    for out in got:
        for k in out:
            assert torch.isfinite(out[k].float()).all(), k
            assert torch.equal(out[k], want[0][k]), (k, knobs)


def assert_1b_expert_same_bits(seed: int, **knobs):
    """The 1B expert built with these emit_cuda knobs (three poisoned runs) and with the defaults
    (one): every output finite and the same, bit for bit."""
    assert_same_bits(*expert_1b(seed), 3, **knobs)


def assert_builds_agree(plan, params, feeds, ref: dict, knobs: dict, want_knobs: dict, runs: int = 2,
                        what: str = ""):
    """The plan built with `knobs` (its poisoned runs) computes the graph's values (`ref`, within
    1e-4) and, bit for bit, what the plan built with `want_knobs` computes. Returns the first
    build's Megakernel."""
    import torch
    mk, got = built_runs(plan, params, feeds, runs, **knobs)
    _, want = built_runs(plan, params, feeds, 1, **want_knobs)
    for out in got:
        for k, v in ref.items():
            torch.testing.assert_close(out[k].cpu().float(), v.float(), atol=1e-4, rtol=1e-4, msg=f"{what} {k}")
            assert torch.equal(out[k], want[0][k]), f"{what} {k}: {knobs} != {want_knobs}"
    return mk


def built_runs(plan, params, feeds, runs: int = 3, **knobs) -> tuple:
    """(a Megakernel of the plan built with these knobs (Megakernel's: impls, weights, hops, ...),
    its poisoned_runs)."""
    from megakernel_gym.compiler.runtime import Megakernel
    mk = Megakernel(plan, **knobs)
    return mk, poisoned_runs(mk, params, feeds, runs)


def poisoned_runs(mk, params, feeds, runs: int = 3) -> list[dict]:
    """A bound megakernel run `runs` times, every buffer poisoned before each run (so a run must
    write all of its output again), and each run's outputs copied out."""
    launch = mk.bind(params, feeds)
    outs = []
    for _ in range(runs):
        launch.poison()
        launch()
        launch.check()
        outs.append({k: v.clone() for k, v in launch.outputs().items()})
    return outs


def waits_and_times(plan, pred):
    """Per task of a prediction: how long its SM sat idle before it started (after its SM's previous
    task, or the step's start), and how long it ran."""
    import numpy as np
    prev = np.zeros(len(plan.tg.tasks))
    for q in plan.queues:
        prev[q[1:]] = np.asarray(pred.finish_us)[q[:-1]]
    return np.asarray(pred.start_us) - prev, np.asarray(pred.finish_us) - np.asarray(pred.start_us)
