"""bench/task_probe.py's summaries of a probed run, on the CPU with probe times made up for a tiny
expert plan: the straggler summary names the op whose last task signals late and the SMs whose
tasks took their first phase slowly, which a median hides."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _probes(plan, first_on_sm: dict[int, float], late: dict[str, float]):
    """Each task: dequeued 0, started 1, input 2, first 2 + its SM's first phase (1 us unless
    first_on_sm says), last +1, signalled +0.5 (+ late[op] for the op's last task)."""
    sm_of = {t: s for s, q in enumerate(plan.queues) for t in q}
    probes, spans = [], []
    last_of = {op: max(ids) for op, ids in plan.tg.by_op.items() if ids}
    for t in plan.tg.tasks:
        first = 2 + first_on_sm.get(sm_of[t.id], 1.0)
        sig = first + 1.5 + (late.get(t.op, 0.0) if t.id == last_of[t.op] else 0.0)
        probes.append({"dequeued": 0.0, "started": 1.0, "input": 2.0, "first": first, "last": first + 1, "signalled": sig})
        spans.append((1.0, sig))
    return probes, spans


def test_stragglers_name_the_late_op_and_the_slow_sms(graphs):
    sys.path.insert(0, str(ROOT / "bench"))
    from task_probe import op_table, stragglers

    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    probes, spans = _probes(plan, {}, {"layers.1.attn.decode_attention": 4.0})
    rows = {r["op"]: r for r in stragglers(plan, [probes, probes], [spans, spans], range(0, 2))}
    # one of two layers ran late by 4 us: the median over layers and runs lies between; no other op waits
    assert 0 < rows["attn.decode_attention"]["spread_us"] <= 4.0
    assert all(r["spread_us"] == 0 for k, r in rows.items() if k != "attn.decode_attention")
    assert all(not r["slow_first_share"] and r["slow_sms"] == [] for r in rows.values())
    # tasks on SM 3 take their first phase 3x as long: every op with tasks there names SM 3, and SM 3 alone
    probes, spans = _probes(plan, {3: 3.0}, {})
    rows = {r["op"]: r for r in stragglers(plan, [probes, probes], [spans, spans], range(0, 2))}
    slow = [r for r in rows.values() if r["slow_first_share"]]
    assert slow and all(r["slow_sms"][0][0] == 3 and len(r["slow_sms"]) == 1 for r in slow)
    assert all(0 < r["slow_first_share"] < 1 for r in slow)
    # the phases table still gives the medians (1 us first phase everywhere but SM 3)
    assert all(r["first"] == 1.0 for r in op_table(plan, [probes], range(0, 2)) if r["first"] is not None)


def test_behind_splits_an_ops_tasks_by_what_runs_before_them_on_their_sm(graphs):
    """task_probe.behind: the tasks right behind a task of their own layer on their SM against the
    rest; made-up probes give the ones behind a 3 us first phase, the rest 1 us."""
    sys.path.insert(0, str(ROOT / "bench"))
    from task_probe import behind, fmt_behind

    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=12)    # 12 SMs: some of o_proj's tasks sit behind one of their layer
    plan = apply_edits(base, expert_edits(base)).plan()
    prev = {b: a for q in plan.queues for a, b in zip(q, q[1:])}
    same = {t.id for t in plan.tg.tasks if t.id in prev and t.op.startswith("layers.")
            and plan.tg.tasks[prev[t.id]].op.split(".")[:2] == t.op.split(".")[:2]}
    probes, spans = [], []
    for t in plan.tg.tasks:
        first = 3.0 if t.id in same else 1.0
        start = 5.0 if t.id in same else 1.0
        probes.append({"dequeued": 0.0, "started": 1.0, "input": 2.0, "first": 2 + first, "last": 3 + first,
                       "signalled": 3.5 + first})
        spans.append((start, start + 2.5 + first))
    rows = behind(plan, [probes], [spans], range(0, 2))
    assert rows and {r["behind"] for r in rows} == {True, False}
    for r in rows:
        assert r["first"] == (3.0 if r["behind"] else 1.0)
        assert r["tasks"] > 0 and r["signal_max_us"] >= r["signal_us"] >= r["start_us"] >= 0
    # an op with tasks in both groups: the ones behind start 4 us later
    both = {r["op"] for r in rows if r["behind"]} & {r["op"] for r in rows if not r["behind"]}
    assert both == {"attn.add"}
    for op in both:
        late, early = (next(r for r in rows if r["op"] == op and r["behind"] is b) for b in (True, False))
        assert late["start_us"] - early["start_us"] == 4.0
    n = {(r["op"], r["behind"]): r["tasks"] for r in rows}
    ops = {r["op"] for r in rows}
    assert all(n.get((op, True), 0) + n.get((op, False), 0) ==
               len([t for t in plan.tg.tasks if t.op.endswith("." + op) and t.op.startswith("layers.")]) / 2
               for op in ops)
    line = fmt_behind(rows)
    behind_part, rest_part = line.split("first start): ")[1].split(" vs ")
    assert behind_part.startswith("attn.add ") and "first 3.00" in behind_part and "first 1.00" in rest_part
    assert fmt_behind([r for r in rows if not r["behind"]]).endswith("none")


def test_layers_are_found_in_every_family_naming_and_the_sim_sits_beside_the_probes(graphs):
    """task_probe groups tasks by layer whatever the family calls its layers, and its sim columns are
    the cost model's own times for the same plan (its windows end where the sim's prediction does)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from task_probe import fmt_sim, layer_key, op_table, sim_ops

    from megakernel_gym.compiler.costmodel import predict
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    assert layer_key("layers.3.mlp.down_proj") == (3, "mlp.down_proj")
    assert layer_key("model.layers.12.self_attn.q_proj") == (12, "self_attn.q_proj")
    assert layer_key("transformer.h.0.attn.decode_attention") == (0, "attn.decode_attention")
    assert layer_key("lm_head") == (None, "lm_head") and layer_key("transformer.ln_f") == (None, "transformer.ln_f")
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    sim = sim_ops(plan, "H100", range(0, 2))
    pred = predict(plan, "H100")
    assert sim["latency_us"] == pred.latency_us
    assert max(w["to_us"] for w in sim["windows"]) <= pred.latency_us
    assert "attn.decode_attention" in sim["busy"] and all(v > 0 for v in sim["busy"].values())
    probes, spans = _probes(plan, {}, {})
    table = op_table(plan, [probes], range(0, 2))
    lines = fmt_sim(sim, table, None)
    row = next(ln for ln in lines if ln.startswith("attn.decode_attention"))
    assert row.split()[1] == "3.50"      # the made-up probes' busy (started 1 -> signalled 4.5) beside the sim's


def test_task_hops_finds_the_op_whose_tasks_the_sim_prices_short(graphs):
    """bench/task_hops.py: with GPU times the sim's own, every op's ready-to-signal agrees; with one op's
    tasks signalling 1 us later on the GPU, that op reads +1 and the ops that wait on it -1 (their inputs
    came later, their own signals did not), and a task absent from the dump is left out."""
    sys.path.insert(0, str(ROOT / "bench"))
    from task_hops import ready_to_signal

    from megakernel_gym.compiler.costmodel import predict
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    p = predict(plan, "H200")
    sim = list(zip(p.start_us, p.finish_us))
    same = ready_to_signal(plan, dict(enumerate(sim)), sim, range(0, 2))
    assert same and all(r["gpu_minus_sim_us"] == 0 for r in same.values())
    late = "layers.1.attn.decode_attention"
    readers = {t for t, deps in plan.tg.deps.items() if set(deps) & set(plan.tg.by_op[late])}
    gpu = {i: (s, f + 1.0) if plan.tg.tasks[i].op == late else (s, f) for i, (s, f) in enumerate(sim)}
    got = ready_to_signal(plan, gpu, sim, range(1, 2))
    assert got["attn.decode_attention"]["gpu_minus_sim_us"] == 1.0
    reader_ops = {plan.tg.tasks[t].op.split(".", 2)[2] for t in readers}
    assert any(got[k]["gpu_minus_sim_us"] == -1.0 for k in reader_ops if k in got)
    assert all(r["gpu_minus_sim_us"] == 0 for k, r in got.items() if k != "attn.decode_attention" and k not in reader_ops)
    some = {i: v for i, v in gpu.items() if plan.tg.tasks[i].op != late}
    assert "attn.decode_attention" not in ready_to_signal(plan, some, sim, range(1, 2))


def test_task_hops_phases_put_a_late_op_where_the_layer_loses_the_time(graphs):
    """task_hops --phases (phase_ends): with GPU times the sim's own, every op's phase ends where the sim's does;
    with one op's tasks signalling 1 us later on the GPU, its phase ends 1 us later there and its step grows by 1 us,
    while the ops before it in the layer are unmoved."""
    sys.path.insert(0, str(ROOT / "bench"))
    from task_hops import phase_ends

    from megakernel_gym.compiler.costmodel import predict
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    p = predict(plan, "H200")
    sim = list(zip(p.start_us, p.finish_us))
    same = phase_ends(plan, dict(enumerate(sim)), sim, range(1, 2))
    assert same and all(abs(r["gpu_us"] - r["sim_us"]) < 1e-9 for r in same)
    late = "layers.1.attn.decode_attention"
    gpu = {i: (s, f + 1.0) if plan.tg.tasks[i].op == late else (s, f) for i, (s, f) in enumerate(sim)}
    got = {r["op"]: r for r in phase_ends(plan, gpu, sim, range(1, 2))}
    att = got["attn.decode_attention"]
    assert abs(att["gpu_us"] - att["sim_us"] - 1.0) < 1e-9
    assert abs(att["gpu_step_us"] - att["sim_step_us"] - 1.0) < 1e-9
    assert all(abs(r["gpu_us"] - r["sim_us"]) < 1e-9 for r in got.values() if r["gpu_us"] < att["gpu_us"] - 1.0)


def test_task_hops_fit_recovers_the_wait_latency_the_tasks_were_timed_with(graphs):
    """task_hops.fit_to_tasks: GPU spans made by the sim itself at a wait latency of 1.2 us are fitted
    back from 2.0 (the tiny expert and default plans, one constant free)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from dataclasses import replace

    import pytest
    from task_hops import fit_to_tasks, op_error_us

    from megakernel_gym.compiler.costmodel import DEVICES, _task_cost_arrays, predict
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base_ir = make_ir(graphs["llama-tiny"], num_sms=8)
    truth = replace(DEVICES["H200"], num_sms=8, quiet_wait_us=None, wait_latency_us=1.2)
    items = []
    for ir in (base_ir, apply_edits(base_ir, expert_edits(base_ir))):
        plan = ir.plan()
        p = predict(plan, truth)
        items.append((plan, _task_cost_arrays(plan), dict(enumerate(zip(p.start_us, p.finish_us))), range(0, 2)))
    start = replace(truth, wait_latency_us=2.0)
    assert op_error_us(items, truth) == 0.0 and op_error_us(items, start) > 0.3
    fitted, after, before = fit_to_tasks(items, start, ("wait_latency_us",), evals=40)
    assert fitted.wait_latency_us == pytest.approx(1.2, abs=0.02) and after < 0.05 < before


def test_task_hops_also_prices_each_plan_with_named_constants_changed():
    """task_hops --also FIELD=VALUE[,...]: the shipped constants first, then those with the fields
    replaced; a field the spec lacks is refused by name before any dump is read."""
    sys.path.insert(0, str(ROOT / "bench"))
    import pytest
    from task_hops import priced_specs

    from megakernel_gym.compiler.costmodel import DEVICES
    assert priced_specs("H200", None) == [DEVICES["H200"]]
    shipped, also = priced_specs("H200", "idle_preloaded=1,busy_power=0.7")
    assert shipped == DEVICES["H200"] and (also.idle_preloaded, also.busy_power) == (1.0, 0.7)
    assert also.wait_latency_us == shipped.wait_latency_us
    with pytest.raises(SystemExit, match="'idle' is not a DeviceSpec field"):
        priced_specs("H200", "idle=1")


def test_the_sim_beside_the_probes_prices_the_positions_the_step_was_fed():
    """task_probe times a step at its inputs' pos; the sim's column beside it is predicted there
    (fed_positions), not at the judge's expectation, and a step with no attention has none."""
    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.compiler.costmodel import fed_positions
    model, inputs = ZOO["llama-tiny"]()
    g = capture(model, inputs, "llama-tiny")
    assert fed_positions(g, dict(zip(g.inputs, inputs))) == inputs[1].tolist()
    model, inputs = ZOO["mlp-tiny"]()
    g = capture(model, inputs, "mlp-tiny")
    assert fed_positions(g, dict(zip(g.inputs, inputs))) is None


def test_task_dumps_are_read_gzipped_or_plain(tmp_path):
    """task_probe --dump writes its tasks gzipped (the device takes at most 64 MiB of working tree and the
    plain dumps were 33 MB of git's 49); task_hops reads that, or a plain `_tasks.json` beside the run."""
    import gzip
    import json
    sys.path.insert(0, str(ROOT / "bench"))
    from task_hops import load_dumps
    dumps = [{"schedule": "default", "tasks": [{"id": 3, "op": "layers.0.mlp.add", "start_us": 1.0, "signal_us": 2.5}]}]
    run = tmp_path / "task_probe_x.json"
    (tmp_path / "task_probe_x_tasks.json").write_text(json.dumps(dumps))
    assert load_dumps(run) == dumps
    packed = [dict(dumps[0], schedule="packed")]
    (tmp_path / "task_probe_x_tasks.json.gz").write_bytes(gzip.compress(json.dumps(packed).encode(), mtime=0))
    assert load_dumps(run) == packed                              # the gzipped one, as task_probe writes it
    assert sorted(p.name for p in (ROOT / "bench" / "results").glob("*_tasks.json")) == []   # git keeps them packed


def test_task_hops_spread_finds_a_wait_groups_late_producer(graphs):
    """task_hops.group_spread: with GPU times the sim's own, a wait group's last producer is where the sim
    put it; with one producer of a layer-1 group signalling 2 us late, only ops reading it read later (by 2 us
    at most: the median of their groups)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from task_hops import group_spread

    from megakernel_gym.compiler.costmodel import predict
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    from megakernel_gym.policies.expert import expert_edits
    base = make_ir(graphs["llama-tiny"], num_sms=8)
    plan = apply_edits(base, expert_edits(base)).plan()
    p = predict(plan, "H200")
    sim = list(zip(p.start_us, p.finish_us))
    same = group_spread(plan, dict(enumerate(sim)), sim, range(0, 2), least=2)
    assert same and all(r["gpu_minus_sim_us"] == 0 for r in same.values())
    late = max(next(sorted(d) for t, d in sorted(plan.tg.deps.items())
                    if len(d) >= 2 and plan.tg.tasks[t].op.startswith("layers.1.")))
    gpu = {i: (s, f + 2.0) if i == late else (s, f) for i, (s, f) in enumerate(sim)}
    got = group_spread(plan, gpu, sim, range(1, 2), least=2)
    moved = {k for k, r in got.items() if r["gpu_minus_sim_us"] > 0}
    assert moved and all(got[k]["gpu_minus_sim_us"] <= 2.0 for k in moved)
    readers = {plan.tg.tasks[t].op.split(".", 2)[2] for t, deps in plan.tg.deps.items() if late in deps}
    assert moved <= readers
