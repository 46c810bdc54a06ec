"""The CPU reference VM: plans executed tile by tile, in many interleavings, against run_graph and
eager PyTorch; a plan with a missing wait computes a wrong answer (or is caught as a race) when
the interleaving is hostile; a deadlocked plan raises instead of hanging; decode steps chain."""
import copy
import random
import signal
from contextlib import contextmanager

import pytest
import torch

from megakernel_gym.compiler import ZOO, capture, module_tensors, run_graph
from megakernel_gym.compiler.schedule import Knobs, build_plan, default_knobs
from megakernel_gym.compiler.tasks import allowed_tiles, lower
from megakernel_gym.compiler.validate import ScheduleError, validate
from megakernel_gym.compiler.vm import DeadlockError, RaceError, execute_plan, run_plan

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]
TOL = 1e-5                 # fp32 max abs error against run_graph and eager
INTERLEAVINGS = 6          # per plan: seeds 0..5, odd seeds adversarial


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiles are a few hundred elements: intra-op threads only add synchronisation, and on a busy
    # CPU they stall for milliseconds per matmul.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def models():
    """name -> (module before its step, graph, params snapshot, inputs by name, run_graph result,
    eager output, eager state after the step)."""
    out = {}
    for name in TINY:
        module, inputs = ZOO[name](seed=0)
        params = {k: v.clone() for k, v in module_tensors(module).items()}
        graph = capture(module, inputs, name)
        ins = dict(zip(graph.inputs, inputs))
        eager = copy.deepcopy(module)
        with torch.no_grad():
            want = eager(*inputs)
        out[name] = (module, graph, params, ins, run_graph(graph, params, ins), want,
                     module_tensors(eager))
    return out


def _group(graph, op):
    if op.kind != "decode_attention":
        return 1
    return graph.tensors[op.inputs[0]].shape[1] // graph.tensors[op.inputs[1]].shape[1]


def _random_tiles(graph, rng, finest=False):
    tg = lower(graph, num_sms=8)
    tiles = {}
    for op in graph.ops:
        if op.kind == "view":
            continue
        _, extent, _ = tg.tiling[op.name]
        options = allowed_tiles(op, extent, _group(graph, op))
        tiles[op.name] = options[0] if finest else rng.choice(options)
    return tiles


def _schedules(graph):
    rng = random.Random(7)
    ops = [o.name for o in graph.ops if o.kind != "view"]
    ranges = {}
    for op in ops:
        lo = rng.randrange(5)
        ranges[op] = (lo, rng.randrange(lo, 5))
    return {
        "sms1": default_knobs(graph, 1),
        "sms3": default_knobs(graph, 3),
        "sms8": default_knobs(graph, 8),
        "sms132": default_knobs(graph, 132),
        "sms8-random-tiles": Knobs(num_sms=8, tiles=_random_tiles(graph, rng)),
        # finest tiles, one counter per op, each op on its own random SM range
        "sms5-op-counters": Knobs(num_sms=5, tiles=_random_tiles(graph, rng, finest=True),
                                  sms=ranges, counters={op: "op" for op in ops}),
    }


def _max_err(got, want):
    return max((got[k].float() - want[k].float()).abs().max().item() for k in want)


SCHEDULES = ["sms1", "sms3", "sms8", "sms132", "sms8-random-tiles", "sms5-op-counters"]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", TINY)
def test_plans_match_run_graph_and_eager(models, name, schedule):
    module, graph, params, ins, ref, want, eager_state = models[name]
    knobs = _schedules(graph)[schedule]
    plan = validate(build_plan(graph, knobs))
    if schedule == "sms5-op-counters":
        assert len(plan.counters) == len(plan.tg.by_op)
    eager = {"output": want, **{k: eager_state[k] for k in graph.written_buffers()}}
    orders, worst = set(), 0.0
    for seed in range(INTERLEAVINGS):
        res = execute_plan(plan, params, ins, random.Random(seed), adversarial=seed % 2 == 1)
        assert not res.races and sorted(res.order) == list(range(len(plan.tg.tasks)))
        orders.add(tuple(res.order))
        got = res.outputs
        assert set(got) == set(ref)
        assert not any(torch.isnan(v).any() for v in got.values()), "an element was never written"
        worst = max(worst, _max_err(got, ref), _max_err(got, eager))
    print(f"{name} {schedule}: {len(plan.tg.tasks)} tasks, {len(orders)} distinct orders, "
          f"max abs err {worst:.2e}")
    assert worst <= TOL
    # the interleavings really differ wherever more than one SM has work
    if sum(1 for q in plan.queues if q) > 1:
        assert len(orders) > 1
    # the caller's tensors are untouched (the plan wrote copies of the caches)
    for k, v in module_tensors(module).items():
        assert torch.equal(params[k], v)


def test_missing_wait_gives_wrong_answer_or_detected_race(models):
    _, graph, params, ins, ref, _, _ = models["llama-tiny"]
    plan = build_plan(graph, default_knobs(graph, 16))
    tg, sm = plan.tg, plan.sm_of()
    # a consumer whose producers all run on other SMs: without its waits nothing orders them
    t = next(t for t in tg.by_op["layers.0.attn.q_rope"] if all(sm[d] != sm[t] for d in tg.deps[t]))
    broken = copy.copy(plan)
    broken.waits = dict(plan.waits)
    broken.waits[t] = []
    with pytest.raises(ScheduleError):
        validate(broken)             # the validator rejects it; the VM runs it anyway
    raised = wrong = clean = 0
    for seed in range(10):
        try:
            run_plan(broken, params, ins, random.Random(seed), adversarial=True)
        except RaceError as e:
            raised += 1
            assert e.task == t and e.producer in tg.deps[t]
            assert "layers.0.attn.q_rope[" in str(e) and "layers.0.attn.q_proj[" in str(e)
        res = execute_plan(broken, params, ins, random.Random(seed), adversarial=True, races="run")
        out = res.outputs["output"]
        if res.races:
            # it read q_proj tiles nobody had written yet: the numbers show it
            assert res.races[0][0] == t
            assert torch.isnan(out).any() or (out - ref["output"]).abs().max() > 1e-3
            wrong += 1
        else:
            assert _max_err(res.outputs, ref) <= TOL
            clean += 1
    print(f"missing wait: {raised} of 10 adversarial runs raised RaceError, {wrong} computed a wrong "
          f"answer with races='run', {clean} happened to run in a safe order")
    assert raised == wrong >= 3, (raised, wrong, clean)


@contextmanager
def _watchdog(seconds):
    def hung(*_):
        raise AssertionError(f"run_plan still running after {seconds}s: it hangs on a deadlock")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_deadlocked_plan_raises(models):
    _, graph, params, ins, _, _, _ = models["mlp-tiny"]
    plan = build_plan(graph, default_knobs(graph, 3))
    tasks = plan.tg.tasks
    # the first task of an SM waits on the counter of that SM's last task: a cycle
    q = next(q for q in plan.queues if len(q) > 2)
    first, last = q[0], q[-1]
    owner = next(c for c in plan.counters if last in c.producers)
    cyclic = copy.copy(plan)
    cyclic.waits = {k: list(v) for k, v in plan.waits.items()}
    cyclic.waits[first].append((owner.id, 1))
    # a threshold no one can reach
    t = next(t for t, w in plan.waits.items() if w)
    c, thr = plan.waits[t][0]
    unreachable = copy.copy(plan)
    unreachable.waits = {k: list(v) for k, v in plan.waits.items()}
    unreachable.waits[t][0] = (c, thr + 1)
    with _watchdog(20):
        for seed in range(4):
            with pytest.raises(DeadlockError, match=r"deadlock after \d+ of \d+ tasks") as ei:
                run_plan(cyclic, params, ins, random.Random(seed), adversarial=seed % 2 == 1)
            assert f"at {tasks[first]} waits on counter {owner.name} at 0, needs 1" in str(ei.value)
            with pytest.raises(DeadlockError) as ei:
                run_plan(unreachable, params, ins, random.Random(seed), adversarial=seed % 2 == 1)
            assert (f"at {tasks[t]} waits on counter {plan.counters[c].name} at 1, needs {thr + 1} "
                    f"(1 producer(s))") in str(ei.value)


def test_unwritten_tile_shows_as_nan(models):
    _, graph, params, ins, ref, _, _ = models["mlp-tiny"]
    plan = build_plan(graph, default_knobs(graph, 8))
    last = plan.tg.by_op["add"]           # the op that writes the graph output
    dropped = last[1]
    partial = copy.copy(plan)
    partial.queues = [[t for t in q if t != dropped] for q in plan.queues]
    out = run_plan(partial, params, ins, random.Random(0))["output"]
    _, extent, size = plan.tg.tiling["add"]
    nan_cols = torch.isnan(out).all(dim=0).nonzero().flatten().tolist()
    assert nan_cols == list(range(size, 2 * size))            # exactly the missing tile
    keep = torch.ones(extent, dtype=torch.bool)
    keep[size:2 * size] = False
    assert (out[:, keep] - ref["output"][:, keep]).abs().max() <= TOL
    with pytest.raises(KeyError, match="params has no tensor 'down_proj.weight'"):
        run_plan(plan, {k: v for k, v in params.items() if k != "down_proj.weight"}, ins)
    with pytest.raises(ValueError, match="races="):
        run_plan(plan, params, ins, races="ignore")


def test_chained_decode_steps_match_eager(models):
    module, graph, params, _, _, _, _ = models["llama-tiny"]
    plan = validate(build_plan(graph, Knobs(num_sms=8, tiles=_random_tiles(graph, random.Random(3)))))
    eager = copy.deepcopy(module)
    written = graph.written_buffers()
    original = dict(params)
    state = dict(params)
    gen = torch.Generator().manual_seed(11)
    pos = torch.tensor([4, 19])
    for step in range(3):
        ids = torch.randint(0, 256, (2,), generator=gen)
        ins = {"token_ids": ids, "pos": pos + step}
        out = run_plan(plan, state, ins, random.Random(step), adversarial=True)
        with torch.no_grad():
            want = eager(ids, pos + step)
        after = module_tensors(eager)
        err = max((out["output"] - want).abs().max().item(),
                  *((out[k] - after[k]).abs().max().item() for k in written))
        assert err <= TOL, (step, err)
        if step == 2:
            # the chain matters: the same step on the caches before steps 0 and 1 differs
            stale = run_plan(plan, original, ins, random.Random(step))
            assert (stale["output"] - want).abs().max() > 1e-3
        state.update({k: out[k] for k in written})


def test_bf16_llama_matches_run_graph():
    from megakernel_gym.compiler.zoo import LlamaConfig, _make_llama
    module, inputs = _make_llama(LlamaConfig.tiny(dtype="bfloat16", tie_embeddings=True))
    params = module_tensors(module)
    graph = capture(module, inputs)
    ins = dict(zip(graph.inputs, inputs))
    ref = run_graph(graph, params, ins)
    plan = validate(build_plan(graph, default_knobs(graph, 8)))
    for seed in range(3):
        got = run_plan(plan, params, ins, random.Random(seed), adversarial=True)
        assert got["output"].dtype == torch.bfloat16
        # tiles round like the whole op does; allow a couple of bf16 ulps at logit scale ~3
        assert _max_err(got, ref) <= 2e-2


def test_softmax_over_the_tiled_axis_stays_whole():
    """A softmax over dim 0 (or a norm of a vector) must not be split along the axis it
    normalizes: each tile would normalize only its own part."""
    import torch
    from torch import nn

    from megakernel_gym.compiler import capture
    from megakernel_gym.compiler.schedule import build_plan, default_knobs
    from megakernel_gym.compiler.tasks import TilingError, lower
    from megakernel_gym.compiler.vm import run_plan

    class Col(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return torch.softmax(self.lin(x), dim=0)

    torch.manual_seed(0)
    m = Col().eval()
    x = torch.randn(4, 8)
    g = capture(m, (x,), "col")
    sm = next(o for o in g.ops if o.kind == "softmax")
    tg = lower(g, num_sms=4)
    assert len(tg.by_op[sm.name]) == 1
    with pytest.raises(TilingError, match="allowed sizes: 4$"):
        lower(g, {sm.name: 2})
    plan = build_plan(g, default_knobs(g, 4))
    from megakernel_gym.compiler import module_tensors
    params = module_tensors(m)
    got = run_plan(plan, params, {g.inputs[0]: x})
    want = m(x)
    assert torch.allclose(got[g.outputs[0]], want, atol=1e-5)
