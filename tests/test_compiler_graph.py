"""Graph IR capture: zoo models -> torch.export -> primitive ops, checked against eager PyTorch."""
from collections import Counter

import pytest
import torch
from torch import nn

from megakernel_gym.compiler import (PRIMITIVES, ZOO, Graph, LlamaConfig, UnsupportedOpError,
                                     capture, module_tensors, run_graph)
from megakernel_gym.compiler.expr import evaluate, format_expr, parse_expr
from megakernel_gym.compiler.ops import decode_attention_ref, rope_ref
from megakernel_gym.compiler.zoo import LlamaDecoder, _make_llama

TINY = ["llama-tiny", "mlp-tiny", "attention-tiny"]


@pytest.fixture(scope="module")
def captured():
    """name -> (module before its step, inputs, graph, params snapshot)."""
    out = {}
    for name in TINY:
        module, inputs = ZOO[name](seed=0)
        before = {k: v.clone() for k, v in module_tensors(module).items()}
        graph = capture(module, inputs, name)
        after = module_tensors(module)
        # capture traces with fake tensors: the module's caches must be untouched
        for k, v in before.items():
            assert torch.equal(after[k], v), f"capture modified {k}"
        out[name] = (module, inputs, graph, before)
    return out


def _assert_valid(graph: Graph):
    assert all(op.kind in PRIMITIVES for op in graph.ops)
    names = [op.name for op in graph.ops]
    assert len(names) == len(set(names)), [n for n, c in Counter(names).items() if c > 1]
    # execution order: every input exists before the op that reads it
    ready = {n for n, s in graph.tensors.items() if s.kind in ("input", "weight", "buffer")}
    for op in graph.ops:
        missing = [t for t in op.inputs if t not in ready]
        assert not missing, f"{op.name} reads {missing} before they are written"
        assert all(t in graph.tensors for t in op.outputs)
        ready.update(op.outputs)
    assert all(o in ready for o in graph.outputs)


@pytest.mark.parametrize("name", TINY)
def test_tiny_zoo_graph_matches_module(captured, name):
    module, inputs, graph, params = captured[name]
    _assert_valid(graph)
    got = run_graph(graph, params, dict(zip(graph.inputs, inputs)))
    with torch.no_grad():
        want = module(*inputs)
    assert got["output"].shape == want.shape
    assert (got["output"] - want).abs().max().item() <= 1e-5
    # the caches the graph writes equal the module's caches after its step
    written = graph.written_buffers()
    assert written == ([] if name == "mlp-tiny" else
                       [n for n in graph.tensors if n.endswith(("k_cache", "v_cache"))])
    state = module_tensors(module)
    for buf in written:
        assert not torch.equal(got[buf], params[buf]), f"{buf} was not written"
        assert (got[buf] - state[buf]).abs().max().item() <= 1e-6


def test_llama_tiny_structure(captured):
    graph = captured["llama-tiny"][2]
    cfg = LlamaConfig.tiny()
    kinds = Counter(op.kind for op in graph.ops)
    for i in range(cfg.layers):
        layer = [op for op in graph.ops if op.name.startswith(f"layers.{i}.")]
        per = Counter(op.kind for op in layer)
        assert per["matmul"] == 7 and per["rmsnorm"] == 2 and per["decode_attention"] == 1
        assert per["rope"] == 2 and per["cache_write"] == 2
        writes = [op.outputs[0] for op in layer if op.kind == "cache_write"]
        assert writes == [f"layers.{i}.attn.k_cache", f"layers.{i}.attn.v_cache"]
    assert kinds["matmul"] == 7 * cfg.layers + 1 and graph.op("lm_head").kind == "matmul"
    assert kinds["rmsnorm"] == 2 * cfg.layers + 1 and graph.op("norm").kind == "rmsnorm"
    assert kinds["decode_attention"] == cfg.layers
    assert len(graph.ops) == 21 * cfg.layers + 3
    assert [op.name for op in graph.ops[:22]] == [
        "embed", "layers.0.attn.norm", "layers.0.attn.q_proj", "layers.0.attn.q_reshape",
        "layers.0.attn.k_proj", "layers.0.attn.k_reshape", "layers.0.attn.v_proj",
        "layers.0.attn.v_reshape", "layers.0.attn.q_rope", "layers.0.attn.k_rope",
        "layers.0.attn.k_cache_write", "layers.0.attn.v_cache_write",
        "layers.0.attn.decode_attention", "layers.0.attn.reshape", "layers.0.attn.o_proj",
        "layers.0.attn.add", "layers.0.mlp.norm", "layers.0.mlp.gate_proj",
        "layers.0.mlp.up_proj", "layers.0.mlp.silu_mul", "layers.0.mlp.down_proj",
        "layers.0.mlp.add"]
    # decode_attention reads the caches after this step's writes
    attn = graph.op("layers.0.attn.decode_attention")
    assert attn.inputs == ["layers.0.attn.q_rope", "layers.0.attn.k_cache",
                           "layers.0.attn.v_cache", "pos"]
    assert attn.attrs["scale"] == pytest.approx(cfg.head_dim ** -0.5)
    q = graph.op("layers.0.attn.q_proj")
    assert q.attrs == {"bias": False, "w_layout": "NK"}
    assert graph.tensors["layers.0.attn.q_proj.weight"].kind == "weight"
    assert graph.tensors["layers.0.attn.k_cache"].kind == "buffer"
    assert graph.tensors["token_ids"].kind == "input" and graph.inputs == ["token_ids", "pos"]
    assert graph.tensors["output"].shape == (cfg.batch, cfg.vocab)


def test_silu_mul_fused(captured):
    for name in ("llama-tiny", "mlp-tiny"):
        graph = captured[name][2]
        fused = [op for op in graph.ops if op.kind == "elementwise" and
                 op.attrs["expr"] == "silu(a) * b"]
        assert fused, f"{name}: no fused silu(a) * b op"
        prefix = "layers.0.mlp." if name == "llama-tiny" else ""
        assert fused[0].inputs == [f"{prefix}gate_proj", f"{prefix}up_proj"]
        # the unfused silu is gone
        assert not any(op.attrs.get("expr") == "silu(a)" for op in graph.ops)


def test_decode_steps_chain_through_returned_caches():
    module, (ids, pos) = ZOO["llama-tiny"](seed=3)
    graph = capture(module, (ids, pos))
    params = {k: v.clone() for k, v in module_tensors(module).items()}
    for step in range(3):
        got = run_graph(graph, params, {"token_ids": ids, "pos": pos})
        with torch.no_grad():
            want = module(ids, pos)
        assert (got["output"] - want).abs().max().item() <= 1e-5, f"step {step}"
        params.update({b: got[b] for b in graph.written_buffers()})
        ids = want.argmax(-1)
        pos = (pos + 1) % LlamaConfig.tiny().max_seq


class _PlainOps(nn.Module):
    """A model written in plain aten: layernorm, x @ W.t(), in-place relu, softmax, views."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ln = nn.LayerNorm(16)
        self.W = nn.Parameter(torch.randn(16, 16, generator=g) / 4)
        self.b = nn.Parameter(torch.randn(16, generator=g))
        self.proj = nn.Linear(16, 16)

    def forward(self, x, y):
        h = self.ln(x) @ self.W.t() + self.b
        h = torch.relu_(h * 2.0 - 1)
        h = self.proj(nn.functional.gelu(h, approximate="tanh") / 3)
        att = torch.softmax(h @ h.transpose(0, 1) * 0.25, dim=-1)
        z = (att @ y).unsqueeze(0).expand(2, 4, 16).permute(1, 0, 2).reshape(8, 16)
        r = (z - z.amax(dim=-1, keepdim=True)).exp().sum(dim=(0, 1))
        return r, z[:, 2:10].mean(-1) + z.select(1, 3)


def test_plain_aten_model_matches():
    torch.manual_seed(0)
    module = _PlainOps().eval()
    inputs = (torch.randn(4, 16), torch.randn(4, 16))
    graph = capture(module, inputs)
    _assert_valid(graph)
    kinds = Counter(op.kind for op in graph.ops)
    assert kinds["layernorm"] == 1 and kinds["softmax"] == 1 and kinds["reduce"] == 4
    # x @ W.t() reads W in its stored [N, K] layout; activation @ activation stays K-major
    assert graph.op("matmul").inputs[1] == "W" and graph.op("matmul").attrs["w_layout"] == "NK"
    assert graph.op("matmul_1").attrs["w_layout"] == "KN"
    assert any(op.attrs.get("expr") == "gelu_tanh(relu((a + b) * 2.0 - 1)) / 3"
               for op in graph.ops)
    got = run_graph(graph, module_tensors(module), dict(zip(graph.inputs, inputs)))
    with torch.no_grad():
        want = module(*inputs)
    assert graph.outputs == ["output.0", "output.1"]
    for name, w in zip(graph.outputs, want):
        assert (got[name] - w).abs().max().item() <= 1e-5


@pytest.mark.parametrize("fn,op", [(lambda x: torch.cumsum(x, 0), "aten.cumsum"),
                                   (lambda x: torch.sort(x)[0], "aten.sort")])
def test_unsupported_op_names_op_and_node(fn, op):
    class Bad(nn.Module):
        def forward(self, x):
            return fn(x * 2) + 1

    with pytest.raises(UnsupportedOpError) as info:
        capture(Bad(), (torch.randn(4, 3),))
    err = info.value
    assert err.op.startswith(op) and err.node == op.split(".")[1]
    assert op in str(err) and repr(err.node) in str(err)


def test_run_graph_names_missing_param(captured):
    graph = captured["mlp-tiny"][2]
    module, inputs = captured["mlp-tiny"][:2]
    params = dict(module_tensors(module))
    del params["down_proj.weight"]
    with pytest.raises(KeyError, match="down_proj.weight"):
        run_graph(graph, params, dict(zip(graph.inputs, inputs)))


def test_bf16_tiny_close_to_eager():
    module, inputs = _make_llama(LlamaConfig.tiny(dtype="bfloat16", tie_embeddings=True))
    params = {k: v.clone() for k, v in module_tensors(module).items()}
    graph = capture(module, inputs)
    assert graph.tensors["output"].dtype == "bfloat16"
    got = run_graph(graph, params, dict(zip(graph.inputs, inputs)))["output"].float()
    with torch.no_grad():
        want = module(*inputs).float()
    # fused elementwise ops skip bf16 roundings of intermediates: close, not equal
    assert (got - want).abs().max().item() <= 0.05 * want.abs().max().item()


# --- expression language ---------------------------------------------------------------------

@pytest.mark.parametrize("junk", ["__import__('os')", "a +", "foo(a)", "a.b", "a ; b", "",
                                  "silu(a, b)", "(a", "a b", "A", "open"])
def test_expr_parser_rejects_junk(junk):
    with pytest.raises(ValueError, match="bad elementwise expr|unknown"):
        parse_expr(junk)


def test_expr_parser_messages_name_the_problem():
    with pytest.raises(ValueError, match="unknown function 'foo'"):
        parse_expr("foo(a)")
    with pytest.raises(ValueError, match="unexpected end"):
        parse_expr("a +")
    with pytest.raises(ValueError, match="uses input"):
        parse_expr("a + c", n_inputs=2)


@pytest.mark.parametrize("text", ["silu(a) * b", "a - (b - c)", "-a ** 2", "(-a) ** 2",
                                  "rsqrt(a + 1e-05) * b", "a ** -0.5", "max(a, 0.0) / (b + 2)",
                                  "a + (b + c)", "gelu_tanh(a) * -1.5"])
def test_expr_round_trip_and_evaluation(text):
    assert format_expr(parse_expr(text)) == text
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.rand(3, 4, generator=g) + 0.5 for _ in range(3))
    f = torch.nn.functional
    want = {"silu(a) * b": f.silu(a) * b, "a - (b - c)": a - (b - c), "-a ** 2": -a ** 2,
            "(-a) ** 2": (-a) ** 2, "rsqrt(a + 1e-05) * b": torch.rsqrt(a + 1e-5) * b,
            "a ** -0.5": a ** -0.5, "max(a, 0.0) / (b + 2)": a.clamp_min(0) / (b + 2),
            "a + (b + c)": a + (b + c),
            "gelu_tanh(a) * -1.5": f.gelu(a, approximate="tanh") * -1.5}[text]
    assert torch.allclose(evaluate(text, [a, b, c]), want, atol=1e-6)


# --- custom op semantics -----------------------------------------------------------------------

def test_decode_attention_reference_semantics():
    g = torch.Generator().manual_seed(0)
    b, hq, hkv, s, d = 2, 4, 2, 8, 16
    q = torch.randn(b, hq, d, generator=g)
    k, v = torch.randn(b, hkv, s, d, generator=g), torch.randn(b, hkv, s, d, generator=g)
    pos = torch.tensor([2, 7])
    out = decode_attention_ref(q, k, v, pos, 0.25)
    # naive per-sequence, per-head loop: query head h reads kv head h // (hq // hkv)
    for bi in range(b):
        for h in range(hq):
            kv = h // (hq // hkv)
            n = int(pos[bi]) + 1
            p = torch.softmax(k[bi, kv, :n] @ q[bi, h] * 0.25, dim=0)
            assert torch.allclose(out[bi, h], p @ v[bi, kv, :n], atol=1e-5)
    # slots after pos are never read
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 3:], v2[0, :, 3:] = 1e4, -1e4
    assert torch.equal(decode_attention_ref(q, k2, v2, pos, 0.25)[0], out[0])


def test_rope_and_cache_write_reference_semantics():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 8, generator=g)
    pos = torch.tensor([0, 5, 31])
    y = rope_ref(x, pos, 10000.0)
    assert torch.allclose(y[0], x[0])                                   # pos 0: identity
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)    # a rotation
    # half-rotation layout: dims (0, 4) form the pair rotated by pos * theta^0
    c, s = torch.cos(torch.tensor(5.0)), torch.sin(torch.tensor(5.0))
    assert torch.allclose(y[1, :, 0], x[1, :, 0] * c - x[1, :, 4] * s, atol=1e-5)
    cache = torch.zeros(3, 2, 32, 8)
    torch.ops.mkgym.cache_write(cache, x, pos)
    for bi, p in enumerate(pos.tolist()):
        assert torch.equal(cache[bi, :, p], x[bi])
    assert cache.abs().sum() == x.abs().sum()                           # nothing else written
    with pytest.raises(ValueError, match="outside the cache"):
        torch.ops.mkgym.cache_write(cache, x, torch.tensor([0, 1, 32]))


def test_custom_ops_pass_opcheck():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 16, generator=g)
    k, v = torch.randn(2, 2, 8, 16, generator=g), torch.randn(2, 2, 8, 16, generator=g)
    pos = torch.tensor([1, 6])
    checks = "ALL"
    torch.library.opcheck(torch.ops.mkgym.rmsnorm.default, (x, torch.ones(16), 1e-5),
                          test_utils=checks)
    torch.library.opcheck(torch.ops.mkgym.rope.default, (x, pos, 10000.0), test_utils=checks)
    torch.library.opcheck(torch.ops.mkgym.decode_attention.default, (x, k, v, pos, 0.25),
                          test_utils=checks)
    torch.library.opcheck(torch.ops.mkgym.cache_write.default, (k.clone(), x[:, :2], pos),
                          test_utils=checks)


# --- the 1B shapes, on the meta device -----------------------------------------------------------

def test_llama_1b_config_and_meta_graph():
    cfg = LlamaConfig.llama_1b()
    assert (cfg.hidden, cfg.layers, cfg.q_heads, cfg.kv_heads, cfg.head_dim, cfg.ffn,
            cfg.vocab) == (2048, 16, 32, 8, 64, 8192, 128256)
    assert cfg.torch_dtype == torch.bfloat16
    assert callable(ZOO["llama-1b"])          # a factory: nothing built at import
    module, inputs = ZOO["llama-1b"](device="meta")
    assert isinstance(module, LlamaDecoder)
    assert all(t.is_meta for t in module_tensors(module).values())
    n_params = sum(p.numel() for p in module.parameters())
    assert abs(n_params - 1.236e9) < 0.001e9, n_params        # Llama-3.2-1B, tied embeddings
    a = module.layers[0].attn
    assert a.q_proj.weight.shape == (2048, 2048) and a.k_proj.weight.shape == (512, 2048)
    assert a.k_cache.shape == (cfg.batch, 8, cfg.max_seq, 64)
    assert module.layers[0].mlp.gate_proj.weight.shape == (8192, 2048)
    graph = capture(module, inputs, "llama-1b")
    _assert_valid(graph)
    kinds = Counter(op.kind for op in graph.ops)
    assert len(graph.ops) == 21 * 16 + 3
    assert kinds["matmul"] == 7 * 16 + 1 and kinds["decode_attention"] == 16
    assert graph.tensors["output"].shape == (1, 128256)
    assert graph.tensors["output"].dtype == "bfloat16"
    for name, ops in (("mlp-1b", 6), ("attention-1b", 15)):
        m, ins = ZOO[name](device="meta")
        g = capture(m, ins, name)
        assert len(g.ops) == ops and all(op.kind in PRIMITIVES for op in g.ops)
        assert g.tensors["output"].shape == (1, 2048)


def test_config_errors_name_the_fix():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        LlamaConfig.tiny(q_heads=3)
    llama, _ = ZOO["llama-tiny"]()
    with pytest.raises(ValueError, match="batch"):
        llama(torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]))


@pytest.mark.gpu
def test_llama_1b_on_gpu_matches_graph():
    module, inputs = ZOO["llama-1b"](device="cuda")
    graph = capture(module, inputs, "llama-1b")
    params = module_tensors(module)
    before = {b: params[b].clone() for b in graph.written_buffers()}
    got = run_graph(graph, params, dict(zip(graph.inputs, inputs)))   # copies the caches it writes
    with torch.no_grad():
        want = module(*inputs)
    assert torch.isfinite(want).all() and want.float().std() > 0.1      # activations stay O(1)
    err = (got["output"].float() - want.float()).abs().max().item()
    assert err <= 0.05 * want.float().abs().max().item(), err
    cos = torch.nn.functional.cosine_similarity(got["output"].float(), want.float(), dim=-1)
    assert cos.min().item() > 0.999
    for b in graph.written_buffers():
        assert not torch.equal(got[b], before[b])
        assert (got[b].float() - params[b].float()).abs().max().item() <= 0.1


@pytest.mark.parametrize("name", ["llama-tiny", "attention-tiny", "mlp-tiny"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_plain_step_computes_the_zoo_model(name, dtype):
    """PlainStep, the fast-PyTorch baseline, is the same decode step: the same output and the same
    k/v rows written, from its own copies of the prefilled caches (the model's are left to it)."""
    from dataclasses import replace
    from megakernel_gym.compiler.zoo import LlamaConfig, PlainStep, make_block
    cfg = replace(LlamaConfig.tiny(), dtype=dtype)
    model, inputs = make_block(name.split("-")[0], cfg, seed=3)
    plain = PlainStep(model)
    with torch.no_grad():
        got, want = plain(*inputs), model(*inputs)
    err = float((got.float() - want.float()).norm() / want.float().norm())
    assert got.dtype == want.dtype and got.shape == want.shape
    assert err < (1e-5 if dtype == "float32" else 2e-2), err
    attn = [w for w in plain.blocks if "k" in w]
    caches = [b for n, b in sorted(model.named_buffers()) if n.endswith("k_cache")]
    assert len(attn) == len(caches) == (0 if name == "mlp-tiny" else cfg.layers if name == "llama-tiny" else 1)
    for w, cache in zip(attn, caches):
        assert w["k"] is not cache and torch.allclose(w["k"].float(), cache.float(), atol=2e-2)


def test_plain_step_takes_zoo_models_only():
    from megakernel_gym.compiler.zoo import PlainStep
    with pytest.raises(TypeError, match="PlainStep takes a zoo"):
        PlainStep(nn.Linear(2, 2))
