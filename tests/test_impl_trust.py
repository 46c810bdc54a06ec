"""`impl` task bodies inside the trust boundary (issue 39, item 4; compiler/impl_guard.py).

The red team's findings, each refused with a message naming the construct and the fix, each beside an
honest neighbour that stays accepted:
- names assembled by the preprocessor (`%:define CAT(a,b) a%:%:b` then `CAT(__tr,ap)()`), trigraphs,
  line splices, `_Pragma`, pasting: the body is read as translation phases 1-3 read it;
- `%:include "/etc/hostname"` (and `??=include`, `#line`, `__has_include`, `_Pragma`): refused before
  NVRTC, NVRTC given no include path, and its log cut to the megakernel's own diagnostics, so no host
  file's text reaches the agent;
- writes outside the declared region: no pointers in a body, views that check every index on the GPU
  (the gpu-marked tests at the end);
- `while (1) { }` scored correct off the GPU: sim and cpu now say not_run, which earns nothing; on the
  GPU the watchdog ends it (tests/test_megakernel_judge.py, gpu-marked);
- unbounded compiles: a cap on the IR's impl code and a compile process with a time limit.
"""
import time

import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.compiler.codegen import CodegenError, emit_cuda, impl_code_problem
from megakernel_gym.compiler.impl_guard import (MAX_IMPL_TOTAL_CHARS, compile_log_for_agent, emit_body,
                                                normalize)
from megakernel_gym.ir_exposure import EditError, apply_edits, make_ir
from megakernel_gym.cuda.nvrtc import CudaCompileError, compile_cuda

from test_codegen import SILU_MUL_BODY


@pytest.fixture(scope="module")
def mlp_1b():
    return capture(*ZOO["mlp-1b"](device="meta"), "mlp-1b")


# ---------------------------------------------------------------------------------------------
# translation phases 1-3


def test_normalize_reads_as_the_preprocessor_does():
    toks = normalize("a <: 1 :> <% %> %: %:%: ??= ??( ??) ??< ??> ??! ??' ??- x\\\ny bitand b /* c */ // d\n\"s\" 'c'")
    assert [t.text for t in toks] == ["a", "[", "1", "]", "{", "}", "#", "##", "#", "[", "]", "{", "}", "|", "^",
                                      "~", "xy", "&", "b", '"s"', "'c'"]
    # each token keeps how it was spelled and its line; a splice joins lines into one token
    assert [t.spelled for t in toks[:4]] == ["a", "<:", "1", ":>"] and toks[16].spelled == "xy"
    assert toks[-2].line == 3 and toks[-2].kind == "str"
    # C++'s `<::` rule: `<` then `::`, unless a `:` or `>` follows
    assert [t.text for t in normalize("a<::b")] == ["a", "<", "::", "b"]
    assert [t.text for t in normalize("a<:::b")] == ["a", "[", "::", "b"]
    # a `#` inside a comment or a char literal is no directive
    assert impl_code_problem("/* see #1 */ // #include nothing\nout[lo] = '#';") is None


# ---------------------------------------------------------------------------------------------
# every attack refused, naming the construct and the fix

ATTACKS = [
    # preprocessor, however spelled
    ("%:define CAT(a,b) a%:%:b\nCAT(__tr,ap)();", "`%:define` (a preprocessor directive; `%:` is a digraph for `#`)",
     "preprocessor lines"),
    ('%:include "/etc/hostname"', "`%:include`", "preprocessor lines"),
    ('??=include "/etc/hostname"', "`??=` is a trigraph for `#`", "preprocessor lines"),
    ('#line 1 "/etc/hostname"\nout[lo] = 0;', "`#line`", "preprocessor lines"),
    ("#\\\ninclude </etc/hostname>", "`#`", "preprocessor lines"),              # a splice after the #
    ("??/\n#include </etc/hostname>", "`#include`", "preprocessor lines"),     # a trigraph backslash splicing
    ('_Pragma("message(\\"x\\")") out[lo] = 0;', "`_Pragma`", "preprocessor operators"),
    ("int x = __has_include(</etc/hostname>);", "`__has_include`", "preprocessor operators"),
    ("out[lo] = a ## b;", "`##`", "token pasting"),
    ("out[lo] = a %:%: b;", "`%:%:` (a digraph for `##`)", "token pasting"),
    ("__VA_ARGS__;", "`__VA_ARGS__`", "preprocessor operators"),
    ("out[lo] = __LINE__;", "`__LINE__`", "predefined macros"),
    # names spelled across a splice, a trigraph or a universal character name
    ("__tr\\\nap();", "`__trap`", "traps"),
    ("__tr??/\nap();", "`__trap`", "traps"),
    ("__tr\\u0061p();", "`\\`", "universal character names"),
    ("int a$b = 1;", "`$`", "characters outside C's basic set"),
    ('printf("%d", 1);', "`printf`", "memory allocation, raw copies or I/O"),
    ('const char* s = "x";', '`"x"`', "string literals"),
    ("float v = 1.f; out[lo] = f2bf(v) + u8'x';", "`u8'x'`", None),  # not refused: a char literal (a neighbour)
    # leaving the task
    ('asm volatile("trap;");', "`asm`", "inline assembly"),
    ("__asm__(\"exit;\");", "`__asm__`", "inline assembly"),
    ("__builtin_trap();", "`__builtin_trap`", "compiler intrinsics"),
    ("long long t = __nvvm_read_ptx_sreg_clock64();", "`__nvvm_read_ptx_sreg_clock64`", "timers"),
    ("long long t = clock64(); out[lo] = t;", "`clock64`", "timers"),
    ("__nanosleep(1000000);", "`__nanosleep`", "sleeps"),
    ("static int n = 0; n++; out[lo] = n;", "`static`", "static storage (state that outlives a run)"),
    ("extern __device__ int x; out[lo] = x;", "`extern`", "extern declarations"),
    ("float* p = new float[4];", "`new`", "memory allocation, raw copies or I/O"),
    ("typedef float F; F x = 1;", "`typedef`", "new types or templates"),
    ("float evil(int); out[lo] = evil(1);", "`evil` (declared as a function)", "function declarations"),
    ("} int host_fn() { return 1; } void g() {", "`}` closes nothing open", None),
    ("((unsigned*)T[0])[0] = 0;", "`T`", "the megakernel's own tables or helpers"),
    ("atomicAdd((unsigned*)counters, 1u);", "`counters`", "the megakernel's own tables or helpers"),
    ("mk_smem[0].x = 0;", "`mk_smem`", "the megakernel's own tables or helpers"),
    # pointers: the write region
    ("((volatile unsigned short*)out)[lo] = 1;", "`*` after `short`", "pointer or reference types"),
    ("unsigned short x = *(out + lo);", "`*`", "pointers (dereferences)"),
    ("unsigned short* p = 0; sink(&out[lo]);", "`*` after `short`", "pointer or reference types"),
    ("sink(&out[lo]);", "`&`", "pointers (address-of)"),
    ("float a = 0; float b = in0[bitand a - a];", "`bitand` (an alternative token for `&`)", "pointers (address-of)"),
    ("auto p = in0; out[lo] = p[0];", "`in0` without an index", "pointers"),
    ("float v = reinterpret_cast<const float&>(in0[0]);", "`reinterpret_cast`", "pointer conversions"),
    ("decltype(in0) x = in0;", "`decltype`", "pointer conversions"),
    ("float acc[4]; (acc + 100000)[0] = 1;", "`acc` without an index", "pointers"),
    ("float acc[4]; int k = 3; k[acc] = 1;", "indexes `k`", None),
    ("float t[2][2]; sm[0] = t[1] - t[0];", "leaves a pointer to a row", "pointers"),
    ("auto f = [&](){ out[lo] = 0; }; f();", "`[`", "subscripts of anything but a named array"),
    ("float* xs = sm + 2048;", "`*` after `float`", "pointer or reference types"),
    ("float out[4]; out[0] = 1;", "declares `out`, which the wrapper gives the body", None),
    ("float4 v; float* p = &v.x;", "`*` after `float`", "pointer or reference types"),
    ("float v = 0; float& r = v;", "`&` after `float`", "pointer or reference types"),
    ("float v[2]; float w = in0[0] -> x;", "`->`", "pointers (member access through one)"),
    ("l: int x = 0; goto *(x);", "`*`", "pointers (dereferences)"),
    # memory written with no pointer token: a surface object's handle is an integer
    ("surf1Dwrite(1.f, 0ull, 0);", "`surf1Dwrite`", "memory reached through a handle"),
    ("auto p = __cvta_global_to_generic(0x1234);", "`__cvta_global_to_generic`", "memory reached through a handle"),
    # an atomic takes one element's address, and nothing else
    ("__shared__ float acc[8]; atomicAdd(&acc[0] + 1000, 1.f);", "`&`", "pointers (address-of)"),
    ("float t[2][2]; atomicAdd(&t[0], 1.f);", "`&`", "pointers (address-of)"),
    ("float x = 0.f; atomicAdd(&x, 1.f);", "`&`", "pointers (address-of)"),
    ("float v = 0.f; fetch(&sm[0], v);", "`&`", "pointers (address-of)"),
]


@pytest.mark.parametrize("code, construct, what", [a for a in ATTACKS if a[2] is not None or "`}`" in a[1]
                                                   or "indexes" in a[1] or "declares" in a[1]],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_attacks_are_refused_naming_the_construct_and_the_fix(construct, code, what):
    problem = impl_code_problem(code)
    assert problem is not None and construct in problem, problem
    if what is not None:
        assert f"may not have {what}" in problem and "; " in problem.split("may not have", 1)[1], problem
    assert problem.startswith("line ")


def test_a_char_literal_with_a_prefix_is_a_char_literal():
    assert impl_code_problem("float v = 1.f; out[lo] = f2bf(v) + u8'x';") is None


def test_attacks_are_edit_errors_and_codegen_refuses_them_on_its_own(mlp_1b):
    ir = make_ir(mlp_1b, num_sms=132)
    for code in ("%:define CAT(a,b) a%:%:b\nCAT(__tr,ap)();", "((volatile unsigned short*)out)[lo] = 1;",
                 "static int n = 0; out[lo] = n++;"):
        with pytest.raises(EditError, match="may not have"):
            apply_edits(ir, f"impl silu_mul <<<{code}>>>")
        with pytest.raises(CodegenError, match="impl silu_mul: line 1"):
            emit_cuda(ir.plan(), impls={"silu_mul": code})


def test_the_kernels_own_file_scope_names_are_refused_by_codegen(mlp_1b):
    """Names no fixed list knows: whatever the generated source declares at file scope (its helpers,
    macros, shared variables), the contract's helpers aside."""
    plan = make_ir(mlp_1b, num_sms=132).plan()
    for code, name in [("out[lo] = f2bf(mk_silu(1.f));", "mk_silu"), ("MK_SYNC();", "MK_SYNC"),
                       ("float d = dot_f32x4(make_uint4(0, 0, 0, 0), make_float4(0, 0, 0, 0));", "dot_f32x4"),
                       ("unpack_bf16x8(make_uint4(0, 0, 0, 0), 0);", "unpack_bf16x8")]:
        with pytest.raises(CodegenError, match=f"`{name}`.*own tables or helpers"):
            emit_cuda(plan, impls={"silu_mul": code})


# ---------------------------------------------------------------------------------------------
# honest neighbours: accepted, and they compile into the megakernel

BLOCK_SUM_BODY = """
__shared__ float red[8];            // one float per warp, as the contract says
float s = 0.f;
for (long long i = threadIdx.x; i < in0_shape[1]; i += blockDim.x) s += bf2f(in0[i]) * bf2f(in0[i]);
s = block_sum(s, red);
const float r = rsqrtf(s / in0_shape[1] + 1e-5f);
for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = f2bf(bf2f(in0[i]) * r * bf2f(in1[i]));
"""
ARRAYS_BODY = """
float acc[4] = {0.f, 0.f, 0.f, 0.f};    /* a register tile */
float t[2][2];
for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
  for (int j = 0; j < 4; ++j) acc[j] += bf2f(in0[i]) * (j + 1);
  t[0][1] = acc[1] - acc[0];
  sm[threadIdx.x] = t[0][1] * 0.5f;
  out<:i:> = f2bf(bf2f(in0[i]) + bf2f(in1[i]));   // digraphs for the brackets: legal C++
}
__syncthreads();
"""
ATOMIC_BODY = """
__shared__ float hist[8];
if (threadIdx.x < 8) hist[threadIdx.x] = 0.f;
__syncthreads();
for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) atomicAdd(&hist[i % 8], bf2f(in0[i]));
atomicAdd(&sm[0], 1.f);
__syncthreads();
for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = f2bf(hist[i % 8] + bf2f(in1[i]));
"""
MISC_BODY = """
const float a = 1.f, b = 2.f; float c = a * b; int d = (int)c & 3; bool e = d && c > 0 and not false;
unsigned u = static_cast<unsigned>(sizeof(float)) * 2u; float h = 0x1p-3f + 1'000; char q = 'x';
float v = warp_sum(c) + warp_max(h) + __shfl_xor_sync(0xffffffffu, c, 16) + (e ? INFINITY : NAN);
int k = d++ * 2; k = ++d * -k + q + (int)u;
if (threadIdx.x == 0 && lo < 0) out[lo] = f2bf(v + k);
"""
HONEST = {"silu_mul": SILU_MUL_BODY, "norm": BLOCK_SUM_BODY, "add": ARRAYS_BODY, "up_proj": MISC_BODY,
          "gate_proj": ATOMIC_BODY.replace("in1[i]", "in0[i % 2048]").replace("bf2f(in0[i])", "bf2f(in0[i % 2048])")}


@pytest.mark.parametrize("name", ["silu", "block_sum", "arrays", "atomic", "misc", "hops", "ring", "stale", "ir_text"])
def test_honest_bodies_are_accepted(name):
    code = {"silu": SILU_MUL_BODY, "block_sum": BLOCK_SUM_BODY, "arrays": ARRAYS_BODY, "atomic": ATOMIC_BODY,
            "misc": MISC_BODY,
            # tests/test_hops.py's, tests/test_weight_ring.py's and tests/test_megakernel_judge.py's bodies
            "hops": "\nfor (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = in0[i];\n",
            "ring": "for (int i = threadIdx.x; i < 1; i += blockDim.x) {}\n",
            "stale": "{ const float o = bf2f(out[lo]); if (o == o) return; }\n" + SILU_MUL_BODY,
            # the IR tests' placeholder text (never compiled): tokens alone are no reason to refuse
            "ir_text": "y = silu(a) * b\ny = x @ w\nreturn x"}[name]
    assert impl_code_problem(code) is None


def test_honest_bodies_compile_into_the_megakernel_as_their_checked_tokens(mlp_1b):
    ir = apply_edits(make_ir(mlp_1b, num_sms=132), "\n".join(f"impl {op} <<<{code}>>>" for op, code in HONEST.items()))
    src, table = emit_cuda(ir.plan(), impls=ir.impls)
    # the tokens, not the text: digraphs as brackets, comments gone, arrays' subscripts checked
    assert "out [ i ] = f2bf" in src and "<:" not in src.split("impl silu_mul", 1)[1] and "register tile" not in src
    assert "acc [ mk_ix ( j , sizeof ( acc ) / sizeof ( acc [ 0 ] ) ," in src
    assert "mk_block_sum ( s , red )" in src
    # the views: out writable inside the tile (silu_mul's [1, 8192] output tiled along axis 1)
    assert "const MkOut<unsigned short, 8192ull, 1ull, 8192ull> out{((unsigned short*)T[S[2]]), lo, hi," in src
    assert "const MkIn<unsigned short, 8192ull> in0" in src and "const MkSm<49152ull> sm" in src
    assert "MK_IMPL_FID" not in src and src.count("// <<< impl ") == len(HONEST)
    assert compile_cuda(src, "megakernel.cu", arch="sm_90", host_includes=False)[:4] == b"\x7fELF"


def test_block_sum_needs_a_float_per_warp(mlp_1b):
    plan = make_ir(mlp_1b, num_sms=132).plan()
    src = emit_cuda(plan, impls={"silu_mul": "__shared__ float red[4];\nout[lo] = f2bf(block_sum(1.f, red));"})[0]
    with pytest.raises(CudaCompileError, match="red needs a float per warp"):
        compile_cuda(src, "megakernel.cu", arch="sm_90", host_includes=False)


# ---------------------------------------------------------------------------------------------
# no host file's text back to the agent


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret_host_file.txt"
    path.write_text("SECRET_HOST_TEXT_4242 = never_shown\n")
    return path


def _host_texts(secret_file):
    texts = ["SECRET_HOST_TEXT_4242", "never_shown"]
    try:
        hostname = open("/etc/hostname").read().strip()
        if len(hostname) >= 4:
            texts.append(hostname)
    except OSError:
        pass
    return texts


def test_no_spelling_of_an_include_reaches_the_agent(sim_env, secret_file):
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    for target in (str(secret_file), "/etc/hostname"):
        for code in (f'%:include "{target}"', f'??=include "{target}"', f'#include "{target}"',
                     f'_Pragma("GCC dependency \\"{target}\\"") out[lo] = 0;', f'#line 1 "{target}"\nint x = y;',
                     f'#if __has_include("{target}")\nout[lo] = 0;\n#endif', f'#\\\ninclude "{target}"'):
            _, r, _, _, info = sim_env.step(f"impl silu_mul <<<{code}>>>")
            reason = info["eval"]["reason"] + str(info["eval"].get("compile_log") or "") + sim_env.last
            assert info["eval"]["status"] == "compile_error" and r <= 0.0, code
            assert "may not have preprocessor" in reason, reason
            assert not any(t in reason for t in _host_texts(secret_file)), reason


def test_nvrtc_log_is_cut_to_the_megakernels_own_diagnostics(mlp_1b, secret_file):
    """Behind the static refusal: were an include to reach NVRTC, neither the file's diagnostics nor the
    source lines NVRTC echoes under them come back; a body's own error does, named by its body line."""
    plan = make_ir(mlp_1b, num_sms=132).plan()
    src = emit_cuda(plan, impls={"silu_mul": "float q = 1.f;\nout[lo] = f2bf(q) + undefined_thing;"})[0]
    marker = "float q = 1.f ;"
    for smuggled in (f'#include "{secret_file}"', f'#line 1 "{secret_file}"\nint zz = yy;'):
        evil = src.replace(marker, marker + "\n" + smuggled, 1) + f"\n// {time.time_ns()}"
        with pytest.raises(CudaCompileError) as e:
            compile_cuda(evil, "megakernel.cu", arch="sm_90", host_includes=False)
        assert "SECRET_HOST_TEXT_4242" in e.value.log or "yy" in e.value.log     # what NVRTC would have said
        shown = compile_log_for_agent(e.value.log, evil)
        assert not any(t in shown for t in _host_texts(secret_file)) and "yy" not in shown, shown
        assert "located outside the megakernel's own source not shown" in shown
    with pytest.raises(CudaCompileError) as e:
        compile_cuda(src, "megakernel.cu", arch="sm_90", host_includes=False)
    shown = compile_log_for_agent(e.value.log, src)
    assert "undefined_thing" in shown and "[impl silu_mul, line 2 of your body]" in shown, shown


def test_the_megakernel_compiles_with_no_include_path():
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void k(float* o) { o[0] = 1.f; }\n'
    assert compile_cuda(src, "k.cu", arch="sm_90")[:4] == b"\x7fELF"       # the host's headers, for others
    with pytest.raises(CudaCompileError, match="no directories in search list"):
        compile_cuda(src, "k.cu", arch="sm_90", host_includes=False)


# ---------------------------------------------------------------------------------------------
# bounded compiles


def test_the_irs_impl_code_is_capped_in_total(mlp_1b):
    ir = make_ir(mlp_1b, num_sms=132)
    body = "float v = 0.f;\n" + "v = v * 1.5f + 1.f;\n" * ((MAX_IMPL_TOTAL_CHARS // 2 - 100) // 20) + "out[lo] = f2bf(v);"
    assert len(body) <= 20_000 and 2 * len(body) <= MAX_IMPL_TOTAL_CHARS
    two = apply_edits(ir, f"impl silu_mul <<<{body}>>>\nimpl add <<<{body}>>>")
    assert set(two.impls) == {"silu_mul", "add"}
    with pytest.raises(EditError, match=f"together .* the limit is {MAX_IMPL_TOTAL_CHARS} for the whole IR"):
        apply_edits(two, f"impl up_proj <<<{body}>>>")
    with pytest.raises(CodegenError, match="the limit is"):
        emit_cuda(ir.plan(), impls={"silu_mul": body, "add": body, "up_proj": body})


def test_agent_code_compiles_in_a_process_of_its_own_under_a_time_limit(mlp_1b):
    plan = make_ir(mlp_1b, num_sms=132).plan()
    src = emit_cuda(plan, impls={"silu_mul": SILU_MUL_BODY})[0] + f"\n// {time.time_ns()}"
    with pytest.raises(CudaCompileError, match="NVRTC ran past 0 s") as e:
        compile_cuda(src, "megakernel.cu", arch="sm_90", host_includes=False, timeout_s=0.3)
    assert e.value.category == "compile_timeout"
    small = f'extern "C" __global__ void k(float* o) {{ o[0] = {time.time_ns() % 1000}.f; }}\n'
    assert compile_cuda(small, "k.cu", arch="sm_90", host_includes=False, timeout_s=60)[:4] == b"\x7fELF"
    with pytest.raises(CudaCompileError, match="undefined"):
        compile_cuda(small.replace("o[0]", "o[undefined]"), "k.cu", arch="sm_90", host_includes=False, timeout_s=60)


# ---------------------------------------------------------------------------------------------
# sim and cpu never score code they did not run


@pytest.fixture(scope="module")
def sim_env():
    import gymnasium as gym
    env = gym.make("MegaKernel-v0", backend="sim")
    yield env.unwrapped
    env.close()


@pytest.mark.parametrize("reward", ["improvement", "best", "score", "kevin"])
def test_a_body_that_never_ends_earns_nothing_off_the_gpu(reward):
    import gymnasium as gym
    from megakernel_gym.rewards.reward_fns import gated_log_speedup, kevin_reward, milestone_reward
    for backend in ("sim", "cpu"):
        env = gym.make("MegaKernel-v0", backend=backend, reward=reward).unwrapped
        try:
            env.reset(seed=0, options={"problem": "mk_mlp_block"})
            _, r, _, _, info = env.step("impl add <<<while (1) { }>>>")
            ev = info["eval"]
            assert ev["status"] == "not_run" and not ev["correct"] and r <= 0.0, (backend, reward, ev["reason"])
            assert ev["reason"].startswith("compiled, not run: impl bodies are scored on the gpu backend only")
            assert env.best == 0.0          # the default schedule's score, where the episode started
            _, r, _, _, info = env.step("unimpl add")       # the schedule alone is scored here again
            assert info["eval"]["status"] == "correct" and r >= 0.0
        finally:
            env.close()
    from megakernel_gym.rewards import EvalResult
    res = EvalResult(status="not_run", reason="x", problem="p", backend="sim", candidate_sha256="")
    assert gated_log_speedup(res) == -1.0 and kevin_reward(res) == 0.0 and milestone_reward(res) == 0.0


# ---------------------------------------------------------------------------------------------
# on the GPU: the views at work (not run on the CPU; run on an H100 with `pytest -m gpu`)


def _run_plan_with(g, impls):
    import torch

    from megakernel_gym.compiler import module_tensors, run_graph
    from megakernel_gym.compiler.runtime import Megakernel
    from megakernel_gym.compiler.zoo import make_block
    model, inputs = make_block("mlp", ZOO_CFG(), seed=0, device="cuda")
    ir = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    ir = apply_edits(ir, "\n".join(f"impl {op} <<<{code}>>>" for op, code in impls.items()))
    mk = Megakernel(ir.plan(), impls=ir.impls)
    params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
    return mk, params, feeds, lambda: run_graph(g, params, feeds)


def ZOO_CFG():
    from megakernel_gym.compiler.zoo import LlamaConfig, step_config
    return step_config("mlp", LlamaConfig.llama_1b().__dict__)


@pytest.mark.gpu
def test_honest_bodies_run_correct_through_the_views(mlp_1b):
    import torch
    mk, params, feeds, ref = _run_plan_with(mlp_1b, {"silu_mul": SILU_MUL_BODY})
    got = mk.run(params, feeds)
    want = ref()
    for k, v in want.items():
        err = float((got[k].float() - v.float().to(got[k].device)).norm() / v.float().norm())
        assert err < 2e-2, (k, err)
    assert torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.parametrize("code, what", [
    ("out[1LL << 40] = 0;\n" + SILU_MUL_BODY, "out (outside the task's tile) at 1099511627776"),
    ("if (threadIdx.x == 0 && hi < out_shape[1]) out[hi] = 0;\n" + SILU_MUL_BODY, "out (outside the task's tile)"),
    ("if (threadIdx.x == 0 && lo > 0) out[lo - 1] = 0;\n" + SILU_MUL_BODY, "out (outside the task's tile)"),
    ("float x = bf2f(in0[-1]);\nif (x == 12345.f) return;\n" + SILU_MUL_BODY, "an input (outside the tensor) at -1"),
    ("__shared__ float red[8];\nred[threadIdx.x] = 1.f;\n" + SILU_MUL_BODY, "an array the body declares"),
    ("sm[49152] = 1.f;\n" + SILU_MUL_BODY, "sm (outside the shared memory the contract gives) at 49152"),
])
def test_indexes_out_of_a_view_are_refused_on_the_gpu(mlp_1b, code, what):
    """The declared write region: out only inside the task's tile, an input inside its tensor, an
    array inside its extent. The access is not performed, the run goes on, and check() names it."""
    from megakernel_gym.compiler.runtime import ImplFaultError
    mk, params, feeds, _ = _run_plan_with(mlp_1b, {"silu_mul": code})
    with pytest.raises(ImplFaultError, match="the impl body of silu_mul indexed") as e:
        mk.run(params, feeds)
    assert what in str(e.value)
    # the context survives, and a clean run of the same kernel reports nothing stale
    honest, params, feeds, _ = _run_plan_with(mlp_1b, {"silu_mul": SILU_MUL_BODY})
    honest.run(params, feeds)


@pytest.mark.gpu
def test_weights_and_inputs_are_unchanged_after_an_impl_run(mlp_1b):
    mk, params, feeds, _ = _run_plan_with(mlp_1b, {"silu_mul": SILU_MUL_BODY})
    launch = mk.bind(params, feeds)
    g = mk.plan.tg.graph
    names = [n for n in g.tensors if g.tensors[n].kind in ("weight", "input")]
    before = {n: launch.input(n).clone() for n in names}
    launch()
    launch.check()
    import torch
    assert all(torch.equal(launch.input(n), before[n]) for n in names)


def test_emit_body_keeps_body_lines_for_the_compilers_messages():
    text = emit_body("float a = 1.f;\n\n/* two\nlines */ out[lo] = f2bf(a);\n")
    assert text.splitlines()[0] == "float a = 1.f ;" and text.splitlines()[3] == "out [ lo ] = f2bf ( a ) ;"
