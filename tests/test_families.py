"""Model families from transformers (compiler/families.py): each adapted model is transformers'
model (its own forward, run with a DynamicCache, gives the same logits), captures, validates, runs
in the CPU VM and compiles; on the GPU its megakernels match transformers' own forward."""
import copy
import random

import pytest
import torch

from megakernel_gym.compiler import capture, module_tensors, predict, run_graph, run_plan
from megakernel_gym.compiler.families import (FAMILIES, FamilyConfig, UnsupportedModelError, build_family_model,
                                              make_family_step, transformers_logits)
from megakernel_gym.compiler.zoo import DecodeStep, step_config
from megakernel_gym.ir_exposure import apply_edits, make_ir
from megakernel_gym.policies.expert import expert_edits

pytest.importorskip("transformers")

FAMS = sorted(FAMILIES)


def _step(fam: str, seed: int = 0, pos=(5, 27), **overrides):
    model, (ids, _) = make_family_step(fam, FamilyConfig.tiny(fam, **overrides), seed=seed)
    return model, (ids, torch.tensor(pos))


@pytest.mark.parametrize("fam", FAMS)
def test_adapter_is_transformers_own_model(fam):
    """The adapted step's logits equal transformers' own forward over the same weights and prefilled
    caches, at positions before and past the tiny sliding window (8); the caches get this step's rows."""
    model, inputs = _step(fam, pos=(3, 20))
    native = transformers_logits(model, *inputs)
    before = {n: b.clone() for n, b in model.named_buffers() if n.endswith("_cache")}
    ours = model(*inputs)
    torch.testing.assert_close(ours, native, atol=2e-5, rtol=2e-5)
    assert float(native.std()) > 0.1    # weights scaled to give O(1) logits, not a vanishing signal
    changed = [n for n, b in model.named_buffers() if n.endswith("_cache") and not torch.equal(b, before[n])]
    assert len(changed) == 2 * 2        # both layers' k and v caches
    names = [n for n, _ in model.named_parameters()]
    if fam == "gpt2":   # the [out, in] rows the adapter streams, not the Conv1D's copies
        assert {"transformer.h.0.attn.q_proj.weight", "transformer.wpe.weight"} <= set(names)
        assert "transformer.h.0.attn.c_attn.weight" not in names
    else:
        assert "model.layers.0.self_attn.q_proj.weight" in names and "model.embed_tokens.weight" in names


@pytest.mark.parametrize("fam", FAMS)
def test_bf16_model_runs_as_it_is(fam):
    """The judge times the adapted bf16 model as it is (eager, CUDA graphs): its activations stay bf16
    through every layer (an fp32 router weight must not leak into the residual stream)."""
    model, inputs = _step(fam, dtype="bfloat16")
    out = model(*inputs)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("fam", FAMS)
def test_float32_reference_of_bf16_weights(fam):
    """A problem's Model at its real dtype: bf16 weights and caches, float32 activations (zoo.DecodeStep
    widens every Linear, Embedding and LayerNorm): close to the bf16 model, in float32."""
    cfg = FamilyConfig.tiny(fam, dtype="bfloat16").__dict__
    torch.manual_seed(0)
    ref = DecodeStep(fam, cfg)
    torch.manual_seed(0)
    base = DecodeStep(fam, cfg, activations=None)
    ids, pos = torch.tensor([1, 2]), torch.tensor([3, 9])
    out, got = ref(ids, pos)[0], base(ids, pos)[0]
    assert out.dtype == torch.float32 and got.dtype == torch.bfloat16
    assert float((got.float() - out).norm() / out.norm()) < 5e-2


def test_sliding_window_is_what_transformers_masks():
    """Mistral at a position past its window: the adapter's window is what makes it agree; with the
    window taken away it attends to slots transformers masks, and the logits move."""
    model, inputs = _step("mistral", pos=(20, 27))
    native = transformers_logits(model, *inputs)
    for layer in model.model.layers:
        assert layer.self_attn._mkgym["window"] == 8
    full = copy.deepcopy(model)
    for layer in full.model.layers:
        layer.self_attn._mkgym["window"] = 0
    torch.testing.assert_close(model(*inputs), native, atol=2e-5, rtol=2e-5)
    assert float((full(*inputs) - native).abs().max()) > 1e-2


def test_relaid_weights_are_one_copy_that_native_lays_out_again():
    """GPT-2's Conv1D (x @ W + b, W [in, out], q/k/v fused) and Mixtral's 3-D experts are computed
    from [out, in] weights made once at adapt time; transformers' own tensors are dropped (no dead
    weights in the model) and native() rebuilds them from the adapted ones, then drops them again."""
    from megakernel_gym.compiler.families import native
    model, inputs = _step("gpt2")
    attn = model.transformer.h[0].attn
    assert not hasattr(attn.c_attn, "weight")
    with native(model):
        w = attn.c_attn.weight
        for i, lin in enumerate((attn.q_proj, attn.k_proj, attn.v_proj)):
            assert torch.equal(lin.weight, w[:, 64 * i:64 * (i + 1)].t()) and lin.weight.is_contiguous()
            assert torch.equal(lin.bias, attn.c_attn.bias[64 * i:64 * (i + 1)])
        assert torch.equal(model.transformer.h[1].mlp.fc.weight, model.transformer.h[1].mlp.c_fc.weight.t())
    assert not hasattr(attn.c_attn, "weight") and model.lm_head.weight is model.transformer.wte.weight
    with torch.no_grad():     # a change to an adapted weight is what transformers' forward sees too
        attn.k_proj.weight.mul_(1.5)
    torch.testing.assert_close(model(*inputs), transformers_logits(model, *inputs), atol=2e-5, rtol=2e-5)
    moe, _ = _step("mixtral")
    block = moe.model.layers[0].mlp
    assert not hasattr(block.experts, "gate_up_proj")
    with native(moe):
        assert torch.equal(block.experts.gate_up_proj[2, 64:], block.expert_up[2].weight)
        assert torch.equal(block.experts.down_proj[3], block.expert_down[3].weight)
    assert all("experts.gate_up_proj" not in n for n, _ in moe.named_parameters())
    with pytest.raises(ValueError, match="kv_heads must equal q_heads"):
        FamilyConfig.tiny("gpt2", kv_heads=2)


def test_mixtral_routes_each_row_to_its_top_k_experts():
    """The dense MoE: every expert runs on every row, weighted by moe_route, which is 0 for all but the
    row's top_k (2 of 4 here) and sums to 1 over them; transformers runs only the chosen experts."""
    from megakernel_gym.compiler.ops import moe_route_ref
    model, inputs = _step("mixtral")
    g = capture(model, inputs, "mixtral")
    routes = [o for o in g.ops if o.kind == "moe_route"]
    assert len(routes) == 2 * 4 and {o.attrs["top_k"] for o in routes} == {2}
    logits = torch.randn(5, 4)
    w = torch.cat([moe_route_ref(logits, 2, e) for e in range(4)], dim=1)
    assert ((w > 0).sum(1) == 2).all() and torch.allclose(w.sum(1), torch.ones(5))
    assert torch.equal(w > 0, torch.zeros_like(w, dtype=torch.bool).scatter(1, logits.topk(2).indices, True))
    with pytest.raises(ValueError, match="top_k <= E"):
        torch.ops.mkgym.moe_route(logits, 5, 0)


def test_qwen2_biases_matter():
    model, inputs = _step("qwen2")
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    ref = model(*inputs)
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.bias.zero_()
    assert float((model(*inputs) - ref).abs().max()) > 1e-3


@pytest.mark.parametrize("fam", FAMS)
def test_family_compiles_validates_and_runs_in_the_vm(fam):
    """Captured with transformers' parameter names; the default plan, the expert's and one with the
    attention split over its positions run in the CPU VM (adversarial interleavings) to the graph's
    answer, which is the adapter's; the expert is predicted faster."""
    model, inputs = _step(fam, seed=1)
    g = capture(model, inputs, fam)
    kinds = {o.kind for o in g.ops}
    assert {"embedding", "matmul", "cache_write", "decode_attention"} <= kinds
    assert ({"layernorm"} if fam == "gpt2" else {"rmsnorm", "rope"}) <= kinds
    assert ("moe_route" in kinds) == (fam == "mixtral")
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    ref = run_graph(g, params, feeds)
    torch.testing.assert_close(ref[g.outputs[0]], copy.deepcopy(model)(*inputs), atol=1e-5, rtol=1e-5)
    ir0 = make_ir(g, num_sms=8)
    expert = apply_edits(ir0, expert_edits(ir0))
    attn = [o.name for o in g.ops if o.kind == "decode_attention"]
    split = apply_edits(ir0, "\n".join(f"split {a} n=3" for a in attn))
    for ir in (ir0, expert, split):
        out = run_plan(ir.plan(), params, feeds, rng=random.Random(0), adversarial=True)
        for k, v in ref.items():
            torch.testing.assert_close(out[k], v, atol=1e-5, rtol=1e-5, msg=f"{fam} {k}")
    assert predict(expert.plan(), "H100").latency_us < predict(ir0.plan(), "H100").latency_us
    if fam == "mistral":
        assert all(o.attrs.get("window") == 8 for o in g.ops if o.kind == "decode_attention")
    else:
        assert all("window" not in o.attrs for o in g.ops if o.kind == "decode_attention")


@pytest.mark.parametrize("fam", ["mistral", "qwen3", "gpt2", "mixtral"])
def test_family_megakernel_compiles_with_nvrtc(fam):
    """The windowed attention (serial and split bodies), the per-head norms, GPT-2's LayerNorm and the
    MoE router reach NVRTC."""
    pytest.importorskip("cuda.bindings")
    from megakernel_gym.compiler.codegen import emit_cuda
    from megakernel_gym.cuda.nvrtc import compile_cuda
    model, inputs = _step(fam, dtype="bfloat16")
    g = capture(model, inputs, fam)
    ir0 = make_ir(g, num_sms=8)
    attn = [o.name for o in g.ops if o.kind == "decode_attention"]
    for ir in (ir0, apply_edits(ir0, expert_edits(ir0) + "".join(f"\nsplit {a} n=2" for a in attn))):
        src = emit_cuda(ir.plan())[0]
        if fam == "mistral":
            assert "max(0, " in src       # the window's first slot
        compile_cuda(src, f"{fam}.cu")


def test_window_leaves_full_attention_source_alone():
    """Full attention's generated source is what it was before windows existed (cached cubins stay valid)."""
    from megakernel_gym.compiler.codegen import emit_cuda
    model, inputs = _step("hf-llama", dtype="bfloat16")
    src = emit_cuda(make_ir(capture(model, inputs, "l"), num_sms=8).plan())[0]
    assert "first = min(n_all" not in src and "max(0, " not in src


def test_bad_configs_are_named():
    with pytest.raises(ValueError, match="family 'gpt-9' is not one of"):
        FamilyConfig.tiny("gpt-9")
    with pytest.raises(ValueError, match=r"bad family config .*the fields are"):
        step_config("qwen2", {**FamilyConfig.tiny("qwen2").__dict__, "hiden": 3})
    with pytest.raises(ValueError, match="block 'qwen3' with a config of family 'qwen2'"):
        step_config("qwen3", FamilyConfig.tiny("qwen2").__dict__)
    with pytest.raises(UnsupportedModelError, match="rope_type 'llama3'"):
        build_family_model(FamilyConfig.tiny("hf-llama", extra={"rope_parameters": {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}), device="meta")
    with pytest.raises(UnsupportedModelError, match="hidden_act 'gelu'"):
        build_family_model(FamilyConfig.tiny("qwen2", extra={"hidden_act": "gelu"}), device="meta")
    with pytest.raises(UnsupportedModelError, match="use_sliding_window=True"):
        build_family_model(FamilyConfig.tiny("qwen2", extra={"use_sliding_window": True, "sliding_window": 8,
                                                            "max_window_layers": 0}), device="meta")


def test_unadapted_transformers_model_names_the_op():
    """transformers' own forward (no adapter) is refused at the first op the compiler has no primitive
    for, named with its module and source line."""
    from torch import nn

    from megakernel_gym.compiler import UnsupportedOpError
    from megakernel_gym.compiler.families import native

    class Raw(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            with native(self.model):
                return self.model(input_ids=ids, use_cache=False).logits

    with pytest.raises(UnsupportedOpError, match=r"unsupported op aten\.\w+.* in module 'model\.model'"):
        capture(Raw(build_family_model(FamilyConfig.tiny("hf-llama"))), (torch.tensor([[1, 2, 3]]),), "raw")


def test_decode_step_reference_of_a_family():
    """A family problem's Model: weights from the global seed, every call from the same caches, the
    written k/v rows among its outputs; the fp32 reference and the bf16 baseline agree to bf16."""
    cfg = FamilyConfig.tiny("qwen3").__dict__
    torch.manual_seed(0)
    ref = DecodeStep("qwen3", cfg)
    torch.manual_seed(0)
    base = DecodeStep("qwen3", {**cfg, "dtype": "bfloat16"}, activations=None)
    ids, pos = torch.tensor([1, 2]), torch.tensor([4, 30])
    out, k, v = ref(ids, pos)
    out2, _, _ = ref(ids, pos)
    assert torch.equal(out, out2) and k.shape == (2, 2, 2, 16) and v.shape == k.shape
    got = base(ids, pos)[0].float()
    assert float((got - out).norm() / out.norm()) < 5e-2


def test_family_problems_in_the_sim():
    """A family's level-5 problem through the env on the sim backend: reset, the expert's edits, a reward."""
    import gymnasium as gym

    import megakernel_gym  # noqa: F401
    env = gym.make("MegaKernel-v0", backend="sim")
    env.reset(seed=0, options={"problem": "mk_mistral_window"})
    mk = env.unwrapped._mk[env.unwrapped.problem.sha256]
    assert any(o.attrs.get("window") == 512 for o in mk.graph.ops if o.kind == "decode_attention")
    _, reward, _, _, info = env.step(expert_edits(mk.ir0))
    assert reward > 0.1 and "correct" in env.unwrapped.last


# ---------------------------------------------------------------------------------------------
# on the GPU


def _rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.gpu
@pytest.mark.parametrize("fam", FAMS)
def test_family_megakernel_matches_transformers_on_gpu(fam):
    """bf16 models of each family, tiny and at a 0.1B-class size, under the default, expert and split
    schedules: the megakernel's logits are no farther from transformers' own forward in float32 (the
    same weights, upcast) than transformers' own bf16 forward is (the judge's rule), on 3 seeds."""
    from megakernel_gym.compiler.runtime import Megakernel
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mid = dict(vocab=4096, hidden=512, layers=4, q_heads=8, kv_heads=8 if fam == "gpt2" else 2, head_dim=64,
               ffn=1536, max_seq=512,
               batch=2, extra={"sliding_window": 128} if FAMILIES[fam].window else {})
    for shapes, pos in ((dict(), (5, 27)), (mid, (100, 450))):
        cfg = FamilyConfig.tiny(fam, dtype="bfloat16", **shapes)
        g = capture(*make_family_step(fam, cfg, device="meta"), fam)
        ir0 = make_ir(g, num_sms=sms)
        attn = [o.name for o in g.ops if o.kind == "decode_attention"]
        plans = {"default": ir0, "expert": apply_edits(ir0, expert_edits(ir0)),
                 "split": apply_edits(ir0, "\n".join(f"split {a} n=4" for a in attn))}
        for seed in (0, 1, 2):
            model, (ids, _) = make_family_step(fam, cfg, seed=seed, device="cuda")
            inputs = (ids, torch.tensor(pos, device="cuda"))
            fp32 = copy.deepcopy(model).float()
            truth = transformers_logits(fp32, *inputs)
            native_bf16 = transformers_logits(model, *inputs)
            tol = max(1.5 * _rel(native_bf16, truth), 1e-3)
            for label, ir in plans.items():
                got = Megakernel(ir.plan()).run(module_tensors(model), dict(zip(g.inputs, inputs)))[g.outputs[0]]
                assert torch.isfinite(got.float()).all(), f"{fam} {label} seed {seed}: NaN/unwritten elements"
                err = _rel(got, truth)
                assert err <= tol, f"{fam} {label} {cfg.hidden} seed {seed}: {err:.2e} from fp32 transformers (tol {tol:.2e})"
