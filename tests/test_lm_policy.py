"""The small transformer policy's interface to the env (policies/lm.py): the rows it reads from the IR
text, the decisions it writes, spelled as edits; compact edit text; and TRL's SFT teaching it a
schedule on the CPU."""
import pytest
import torch

from megakernel_gym.compiler import capture
from megakernel_gym.compiler.families import FamilyConfig, make_family_step
from megakernel_gym.compiler.zoo import ZOO
from megakernel_gym.ir_exposure import EditError, apply_edits, compact_edits, make_ir, render
from megakernel_gym.policies.expert import expert_edits
from megakernel_gym.policies.lm import (apply_decisions, decisions_of, decisions_to_edits, demonstration, ir_rows,
                                        parse_decisions, policy_rows, prompt_of)

pytest.importorskip("transformers")


def _ir(fam: str, layers: int = 4, **kw):
    cfg = FamilyConfig.tiny(fam, layers=layers, **kw)
    return make_ir(capture(*make_family_step(fam, cfg, device="meta"), f"{fam}-t"), num_sms=16)


@pytest.fixture(scope="module")
def irs():
    return {fam: _ir(fam) for fam in ("hf-llama", "qwen3", "gpt2", "mixtral")}


def test_rows_read_the_ir_text(irs):
    """One row per op line (a repeat block's lines once, with its layers); readers found through the
    text's shorthand, a KV cache's readers through the cache write's output name; the policy decides
    for the rows outside a written-out layer (layer 0 takes the repeat block's decisions)."""
    ir = irs["qwen3"]
    text = render(ir)
    rows = ir_rows(text)
    assert len(rows) == sum(ln.lstrip().startswith("op ") for ln in text.splitlines())
    assert any(r.layers == (1, 3) for r in rows) and any(r.layers is None for r in rows)
    by = {r.name: r for r in rows}
    kw = by["model.layers.{i}.self_attn.k_cache_write"]
    assert kw.readers == ["model.layers.{i}.self_attn.decode_attention"]
    assert by["model.layers.{i}.self_attn.q_norm"].readers == ["model.layers.{i}.self_attn.rope"]
    assert by["model.layers.{i}.self_attn.q_proj"].readers == ["model.layers.{i}.self_attn.q_norm"]
    prompt, _ = prompt_of(text)
    assert "model." not in prompt and "q_proj" not in prompt      # kinds and shapes, no names
    mine = policy_rows(rows)
    assert prompt.count(";") == len(mine) and prompt.startswith("sms 16")
    assert {r.alias_of for r in rows if r not in mine} == {r.name for r in mine if r.layers}
    assert by["model.layers.0.self_attn.q_norm"].alias_of == "model.layers.{i}.self_attn.q_norm"


@pytest.mark.parametrize("fam", ["hf-llama", "qwen3", "gpt2", "mixtral"])
def test_decisions_round_trip_the_expert(irs, fam):
    """The expert schedule as decisions, spelled back as edits, is the expert's IR."""
    ir0 = irs[fam]
    expert = apply_edits(ir0, expert_edits(ir0))
    rows = ir_rows(render(ir0))
    completion = decisions_of(rows, ir0, expert)
    assert completion.count(";") == len(policy_rows(rows))
    text = decisions_to_edits(rows, completion)
    assert "{1..3}" in text and "model.layers.0." in text or "transformer.h.0." in text
    assert render(apply_edits(ir0, text)) == render(expert)


def test_decisions_tolerate_junk_and_drop_refused_lines(irs):
    """Unknown words are ignored and missing rows mean no change; a line the IR refuses (inlining
    Qwen3's q_norm, which feeds a rope, not a matmul) is dropped and the rest applied."""
    ir0 = irs["qwen3"]
    rows = ir_rows(render(ir0))
    assert decisions_to_edits(rows, "banana ; ; t7x ; <unk> s99999 ;") == ""
    assert parse_decisions("fuse ; op", 4) == [["fuse"], ["op"], [], []]
    expert = apply_edits(ir0, expert_edits(ir0))
    segs = decisions_of(rows, ir0, expert).split(" ; ")
    qn = [i for i, r in enumerate(policy_rows(rows)) if r.name.endswith("q_norm")]
    assert len(qn) == 1
    segs[qn[0]] = "inline"         # the block's row, and so layer 0's too: two lines refused
    text, ir, dropped = apply_decisions(ir0, rows, " ; ".join(segs))
    assert dropped == 2 and "q_norm" not in text
    assert render(ir) == render(expert)
    with pytest.raises(EditError):
        apply_edits(ir0, decisions_to_edits(rows, " ; ".join(segs)))


def test_compact_edits_same_schedule(irs):
    """compact_edits writes a line every layer has once, with {i}: the same IR, far fewer lines; lines
    for some layers only stay as they are; impl text is left alone."""
    for fam, ir0 in irs.items():
        full = expert_edits(ir0)
        short = compact_edits(ir0, full)
        assert len(short.splitlines()) < len(full.splitlines()) and "{i}" in short
        assert render(apply_edits(ir0, short)) == render(apply_edits(ir0, full))
    ir0 = irs["hf-llama"]
    partial = "tile model.layers.0.self_attn.q_proj n=16\ntile model.layers.1.self_attn.q_proj n=16"
    assert compact_edits(ir0, partial).splitlines() == partial.splitlines()
    impl = "impl model.norm <<<out[0] = 0;>>>"
    assert compact_edits(ir0, impl) == impl


def test_demonstration_is_at_least_the_expert():
    """A demonstration's completion spells a schedule the sim predicts no slower than the expert's."""
    ir0 = make_ir(capture(*ZOO["llama-tiny"](device="meta"), "llama-tiny"), num_sms=16)
    d = demonstration(ir0, "H100")
    assert d["best_us"] <= d["expert_us"] < d["default_us"]
    rows = ir_rows(render(ir0))
    _, ir, dropped = apply_decisions(ir0, rows, d["completion"])
    assert dropped == 0 and ir is not ir0


def test_augment_inserts_unseen_rows(irs):
    """Augmented demonstrations keep every real row and its decision in order, and add made-up rows of
    signatures no demonstration has, decided `-`."""
    import random

    from megakernel_gym.policies.lm import augment, segments, signature
    ir0 = irs["hf-llama"]
    prompt, rows = prompt_of(render(ir0))
    label = decisions_of(rows, ir0, apply_edits(ir0, expert_edits(ir0)))
    real = segments(prompt)[1]
    known = {signature(r) for r in real}
    p2, c2 = augment(prompt, label, known, random.Random(3), rows=4)
    new = segments(p2)[1]
    decs = [" ".join(w) or "-" for w in parse_decisions(c2, len(new))]
    assert len(new) > len(real) and p2.splitlines()[0] == prompt.splitlines()[0]
    kept = [(r, d) for r, d in zip(new, decs) if signature(r) in known]
    assert kept == list(zip(real, [" ".join(w) or "-" for w in parse_decisions(label, len(real))]))
    assert all(d == "-" for r, d in zip(new, decs) if signature(r) not in known)


def test_action_mask_from_demonstrations(tmp_path, irs):
    """action_words: each signature's words in the demonstrations; decide draws only those (an unseen
    signature: its kind's words less fuse and inline), so even an untrained model never fuses a
    matmul into a norm it has not seen fused."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from megakernel_gym.policies.lm import _allowed, action_words, decide, make_lm, segments
    ir0 = irs["hf-llama"]
    prompt, rows = prompt_of(render(ir0))
    label = decisions_of(rows, ir0, apply_edits(ir0, expert_edits(ir0)))
    acts = action_words([(prompt, label)])
    assert acts["signatures"]["rmsnorm < matmul"] == ["inline", "op"]
    assert "fuse" in acts["kinds"]["matmul"] and acts["signatures"]["matmul < elementwise"] == ["fuse"]
    acts["kinds"]["matmul"] = ["fuse", "op", "t*"]
    assert set(_allowed("matmul < rmsnorm shape 1 64 grid 4 16", acts)) == \
        {"-", ";", "op"} | {f"t{2 ** k}" for k in range(13)}
    assert _allowed("rope < none shape 1 2 grid 2 1", acts) == ["-", ";"]
    qprompt, qrows = prompt_of(render(irs["qwen3"]))
    path = make_lm(tmp_path / "m", [prompt, qprompt], n_layer=1, n_embd=32, n_head=2, n_positions=1024)
    out = decide(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), qprompt,
                 sample=True, actions=acts)
    for row, words in zip(segments(qprompt)[1], parse_decisions(out["completion"], len(policy_rows(qrows)))):
        ok = set(_allowed(row, acts))
        assert set(words) <= ok, (row, words)


def test_sft_teaches_a_schedule(tmp_path, irs):
    """TRL's SFTTrainer on one demonstration (loss on its decision tokens): the freshly made GPT-2 then
    writes its decisions greedily, one per row (decide feeds each row's words in)."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from megakernel_gym.policies.lm import LMGenerator, decide, make_lm, segments, sequence_ids
    ir0 = irs["gpt2"]
    expert = apply_edits(ir0, expert_edits(ir0))
    prompt, rows = prompt_of(render(ir0))
    label = decisions_of(rows, ir0, expert)
    path = make_lm(tmp_path / "m", [prompt], n_layer=2, n_embd=64, n_head=2, n_positions=1024)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    ids, mask = sequence_ids(tok, prompt, label)
    assert tok.unk_token_id not in ids and sum(mask) == len(label.split())
    n = len(policy_rows(rows))
    assert len(segments(prompt)[1]) == n
    untrained = decide(AutoModelForCausalLM.from_pretrained(path), tok, prompt)
    assert untrained["completion"].count(";") == n          # aligned with the rows whatever it writes
    assert len(untrained["completion_ids"]) == len(untrained["env_mask"]) == len(untrained["logprobs"])
    torch.manual_seed(0)
    ds = datasets.Dataset.from_list([{"input_ids": ids, "completion_mask": mask}] * 8)
    args = trl.SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=40, per_device_train_batch_size=8,
                         learning_rate=3e-3, completion_only_loss=True, report_to="none", save_strategy="no",
                         use_cpu=True, bf16=False, logging_steps=40, max_length=1024, gradient_checkpointing=False)
    trainer = trl.SFTTrainer(model=path, args=args, train_dataset=ds, processing_class=tok)
    trainer.train()
    trainer.save_model(str(tmp_path / "out"))
    tok.save_pretrained(tmp_path / "out")
    got = LMGenerator(tmp_path / "out")(prompt)
    assert parse_decisions(got, n) == parse_decisions(label, n)


def test_lm_policy_plays_in_the_env(monkeypatch):
    """LMPolicy reads the observation text, sends its decisions as edits, drops the line the env
    refuses (its feedback names it) and sends the rest, then submits: the episode scores the rest."""
    gym = pytest.importorskip("gymnasium")  # noqa: F841
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies import baselines, lm
    env = MegaKernelEnv(backend="sim")
    obs, info = env.reset(seed=0, options={"problem": "mk_gpt2_medium"})
    rows = ir_rows(obs["code"])
    expert = apply_edits(env.ir, expert_edits(env.ir))
    label = decisions_of(rows, env.ir, expert).split(" ; ")
    bad = next(i for i, r in enumerate(policy_rows(rows)) if r.kind == "embedding")
    label[bad] = (label[bad].replace("-", "") + " inline").strip()   # an embedding is no norm: refused

    class Fixed:
        def __init__(self, path=None):
            pass

        def __call__(self, prompt, n_rows, sample=False, seed=0):
            return " ; ".join(label)

    monkeypatch.setattr(lm, "LMGenerator", Fixed)
    policy = baselines.make_policy("lm")
    policy.reset(env, obs, info)
    actions = []
    while True:
        actions.append(policy.act(obs, info))
        obs, reward, term, trunc, info = env.step(actions[-1])
        if term or trunc:
            break
    assert actions[-1] == "submit" and len(actions) == 3
    assert "inline" in actions[0] and actions[1] == "\n".join(ln for ln in actions[0].splitlines()
                                                             if not ln.startswith("inline transformer.wte"))
    assert render(env.ir) == render(expert)
    env.close()


def test_export_schedules(tmp_path):
    """`mkgym export --policy expert` writes each level-5 problem's schedule as edits (compact), its CUDA C
    and a kernel.py whose ModelNew builds that megakernel; a kernel problem or an unknown policy is refused."""
    import json
    import subprocess
    import sys

    from megakernel_gym.policies.export import ExportError, export_schedules
    index = export_schedules(tmp_path / "mk", "expert", problems=["mk_gpt2_medium"])
    row = index["schedules"][0]
    folder = tmp_path / "mk" / row["folder"]
    edits = (folder / "schedule.edits").read_text()
    assert row["sim_speedup"] > 1.1 and "{" in edits and row["edit_lines"] == len(edits.splitlines()) < 40
    assert "__global__" in (folder / "megakernel.cu").read_text()
    assert "class ModelNew(ScheduledMegakernel)" in (folder / "kernel.py").read_text()
    compile(open(folder / "kernel.py").read(), "kernel.py", "exec")
    assert json.loads((folder / "meta.json").read_text())["policy"] == "expert"
    # a policy whose edits come over several turns (random: one menu edit a turn): the schedule holds
    # them all, and rebuilds the IR its episode left
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies.baselines import make_policy
    from megakernel_gym.policies.export import played_schedule
    export_schedules(tmp_path / "rnd", "random", problems=["mk_gpt2_medium"])
    env = MegaKernelEnv(backend="sim", device="H100")
    ir0, taken, ir = played_schedule(env, make_policy("random"), "mk_gpt2_medium")
    env.close()
    assert len(taken) > 1
    text = (tmp_path / "rnd" / "mk_gpt2_medium" / "schedule.edits").read_text()
    assert render(apply_edits(ir0, text)) == render(ir)
    with pytest.raises(ExportError, match="name a level-5 problem"):
        export_schedules(tmp_path / "x", "expert", problems=["softmax"])
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "export", "--out", str(tmp_path / "y"),
                        "--policy", "nope"], capture_output=True, text=True)
    assert r.returncode != 0 and "unknown policy 'nope'" in r.stderr


@pytest.mark.gpu
def test_exported_megakernel_runs(tmp_path):
    """An exported schedule's kernel.py runs: ModelNew(*get_init_inputs()) on the problem's inputs gives
    the logits of the problem's float32-activation reference within bf16 error."""
    import importlib

    from megakernel_gym import load_kernel
    from megakernel_gym.policies.export import export_schedules
    name = "mk_gpt2_medium"
    export_schedules(tmp_path, "expert", problems=[name])
    mod = importlib.import_module(f"megakernel_gym.curriculum.problems.{name}")
    init = mod.get_init_inputs()
    torch.manual_seed(1)
    inputs = [x.cuda() for x in mod.get_inputs()]
    torch.manual_seed(0)                   # the judge's init seed: Model and ModelNew draw the same weights
    ref_model = mod.Model(*init).cuda()
    torch.manual_seed(0)
    new = load_kernel(tmp_path / name)(*init)
    assert set(new.state_dict()) == set(ref_model.state_dict())
    with torch.no_grad():
        refs = ref_model(*inputs)
    for _ in range(2):                     # each call starts from the prefilled caches
        gots = new(*inputs)
        assert len(gots) == len(refs) == 3
        for got, ref in zip(gots, refs):
            err = (got.float() - ref.float()).norm() / ref.float().norm()
            assert got.shape == ref.shape and float(err) < 0.03


def test_shipped_policy_on_a_held_out_family():
    """The trained model that ships (policies/lm_policy) plays a held-out family's problem in the sim
    env from its observation text: every edit it sends is taken, and the sim predicts it faster than
    the default schedule by most of the expert's margin."""
    pytest.importorskip("gymnasium")
    from megakernel_gym.compiler import predict
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies import baselines
    from megakernel_gym.policies.lm import SHIPPED_MODEL
    if not (SHIPPED_MODEL / "model.safetensors").is_file():
        pytest.fail("the trained policy is missing: run `python bench/learning_lm.py` (it saves policies/lm_policy)")
    env = MegaKernelEnv(backend="sim", device="H100")
    obs, info = env.reset(seed=0, options={"problem": "mk_qwen3_0p6b"})
    ir0 = env.ir
    policy = baselines.make_policy("lm")
    policy.reset(env, obs, info)
    first = policy.act(obs, info)
    obs, _, term, trunc, info = env.step(first)
    assert "No edit was applied" not in obs["feedback"]
    expert = apply_edits(ir0, expert_edits(ir0))
    base = predict(ir0.plan(), "H100").latency_us
    got, best = base / predict(env.ir.plan(), "H100").latency_us, base / predict(expert.plan(), "H100").latency_us
    assert got > 1 + 0.8 * (best - 1), (got, best)
    env.close()


def test_lm_policy_on_text_it_cannot_read():
    """An observation with no IR text (or junk where the IR was) gets `submit`, not a crash."""
    from megakernel_gym.policies import baselines
    policy = baselines.make_policy("lm")
    policy.kind, policy.lines = "edits", None
    for code in ("", "mkir v2 nothing here", "no IR at all\nop x y"):
        policy.lines, policy.turn = None, 0
        assert policy.act({"code": code, "feedback": ""}, {}) == "submit"
