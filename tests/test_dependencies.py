"""tasks.derive_dependencies (numpy, an op's spans against earlier ops' at once) gives exactly the
edges of the task-by-task definition: a task depends on each earlier op's task whose write overlaps
what it reads or writes, or whose read overlaps what it writes."""
import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.tasks import derive_dependencies
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits


def by_definition(tg) -> dict[int, set[int]]:
    writers, readers = {}, {}
    deps = {t.id: set() for t in tg.tasks}
    for op in tg.op_order():
        ids = tg.by_op[op]
        for tid in ids:
            t = tg.tasks[tid]
            for r in t.reads:
                deps[tid].update(x for reg, x in writers.get(r.tensor, []) if reg.overlaps(r))
            for w in t.writes:
                deps[tid].update(x for reg, x in writers.get(w.tensor, []) + readers.get(w.tensor, [])
                                 if reg.overlaps(w))
        for tid in ids:
            t = tg.tasks[tid]
            for r in t.reads:
                readers.setdefault(r.tensor, []).append((r, tid))
            for w in t.writes:
                writers.setdefault(w.tensor, []).append((w, tid))
            deps[tid].discard(tid)
    return deps


@pytest.mark.parametrize("name,sms", [("llama-tiny", 8), ("attention-tiny", 8), ("mlp-tiny", 8), ("llama-1b", 132)])
def test_numpy_dependencies_are_the_definitions(name, sms):
    g = capture(*ZOO[name](device="meta"), name)
    ir = make_ir(g, num_sms=sms)
    kinds = {o.name: o.kind for o in g.ops}
    split3 = "\n".join(f"split {n} n=3" for n in ir.ops if kinds[n] == "decode_attention")
    for text in ["", tuned_edits(ir), expert_edits(ir), tuned_edits(ir) + "\n" + split3]:
        tg = apply_edits(ir, text).plan().tg
        want = by_definition(tg)
        assert derive_dependencies(tg) == want
        assert tg.deps == want
        assert sum(map(len, want.values())) > len(tg.tasks) // 2      # a real graph of edges, not an empty one


def test_lowering_op_by_op_gives_what_lowering_afresh_does_after_random_edits():
    """`lower` keeps each op's tasks and the overlaps between pairs of ops' lowerings, so an edit
    relowers only the ops it changed: after each of 60 random edit scripts (tiles, fusions, inlines,
    splits among them), the task graph is the one a lowering with nothing kept gives, to the task,
    its regions and every dependency."""
    import random

    from megakernel_gym.compiler import tasks
    from megakernel_gym.ir_exposure.edits import random_edit
    g = capture(*ZOO["llama-tiny"](), "llama-tiny")
    rng = random.Random(7)
    ir, changed = make_ir(g, num_sms=8), 0
    for _ in range(70):
        try:
            ir = apply_edits(ir, "\n".join(random_edit(ir, rng) for _ in range(rng.randint(1, 3))))
        except Exception:   # refused: the IR stays
            continue
        k = ir.knobs
        warm = tasks.lower(g, k.tiles, k.num_sms, dict(ir.fused), k.splits)
        tasks._OP_CACHES.clear()
        cold = tasks.lower(g, k.tiles, k.num_sms, dict(ir.fused), k.splits)
        assert [repr(t) for t in warm.tasks] == [repr(t) for t in cold.tasks]
        assert warm.by_op == cold.by_op and warm.tiling == cold.tiling
        for a, b in zip(tasks.dep_edges(warm), tasks.dep_edges(cold)):
            assert a.tolist() == b.tolist()
        assert warm.deps == cold.deps == derive_dependencies(cold)
        changed += len(ir.fused) + len(k.tiles) + len(k.splits) > 0
    assert changed >= 20   # the lowering itself changed along the way, not only SM ranges


def test_lowerings_from_several_threads_share_the_op_cache_safely():
    """Vector envs may lower in threads: 4 threads lowering random tile sizes of one graph at once get
    the task graphs a lowering with nothing kept gives."""
    import random
    import threading

    from megakernel_gym.compiler import tasks
    g = capture(*ZOO["llama-tiny"](), "llama-tiny")
    ops = [o for o in g.ops if o.kind == "matmul"]
    configs = []
    rng = random.Random(3)
    for _ in range(24):
        configs.append({o.name: rng.choice(tasks.allowed_tiles(o, g.tensors[o.outputs[0]].shape[-1]))
                        for o in rng.sample(ops, 3)})
    got: dict[int, object] = {}
    errors: list[BaseException] = []

    def work(k: int):
        try:
            for i in range(k, len(configs), 4):
                got[i] = tasks.lower(g, configs[i], 8)
        except BaseException as e:   # reported below, not lost in the thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == len(configs)
    for i, tiles in enumerate(configs):
        tasks._OP_CACHES.clear()
        cold = tasks.lower(g, tiles, 8)
        assert [repr(t) for t in got[i].tasks] == [repr(t) for t in cold.tasks]
        assert got[i].deps == cold.deps


def test_an_edited_plan_pickles_and_predicts_the_same_after():
    """The GPU judge sends its plans to a worker process by pickle: an edit's op-by-op lowering (whose
    pairs hold weak references to other ops' lowerings) is a cache of this process, left behind."""
    import pickle

    from megakernel_gym.compiler.costmodel import predict
    g = capture(*ZOO["llama-tiny"](device="meta"), "llama-tiny")
    ir = make_ir(g, num_sms=8)
    expert = apply_edits(ir, expert_edits(ir))
    for x in (ir, expert, apply_edits(expert, "tile layers.0.mlp.down_proj n=16")):
        plan = x.plan()
        plan.tg.deps
        back = pickle.loads(pickle.dumps(plan))
        assert len(back.tg.tasks) == len(plan.tg.tasks) and back.tg.deps == plan.tg.deps
        assert predict(back, "H100").latency_us == predict(plan, "H100").latency_us
