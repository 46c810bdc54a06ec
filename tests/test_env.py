"""MegaKernel-v0 (env/): registration, Gymnasium's env checker, scripted episodes, bad input."""
import math
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import megakernel_gym  # noqa: F401  (registers MegaKernel-v0)
from megakernel_gym.curriculum import reference_candidates
from megakernel_gym.env.megakernel import MegaKernelEnv, discounted_returns

# measured 7% faster on the 1B-shaped step (1,548 -> 1,448 us, bench/results/megakernel_schedules.json), predicted faster too
FUSED_MLP = "fuse gate_proj into silu_mul\nfuse up_proj into silu_mul\nfuse down_proj into add"
SLOWER_MLP = "assign * sms=0-63"


@pytest.fixture(scope="module")
def sim_env():
    env = gym.make("MegaKernel-v0", backend="sim")
    yield env.unwrapped
    env.close()


@pytest.fixture(scope="module")
def cpu_env():
    env = gym.make("MegaKernel-v0", backend="cpu", render_mode="ansi")
    yield env.unwrapped
    env.close()


def test_registered_with_no_import_and_by_module_path():
    assert "MegaKernel-v0" in gym.registry and gym.registry["MegaKernel-v0"].nondeterministic
    # after `pip install`, importing gymnasium alone registers it (megakernel_gym-gymnasium.pth), and
    # Gymnasium's "module:Env" form works too; both in a fresh interpreter that never imports megakernel_gym
    for env_id in ("MegaKernel-v0", "megakernel_gym:MegaKernel-v0"):
        code = ("import sys, gymnasium as gym; e = gym.make(%r, backend='sim'); "
                "print(type(e.unwrapped).__name__)" % env_id)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
        assert r.returncode == 0, (env_id, r.stderr[-2000:])
        assert "MegaKernelEnv" in r.stdout


@pytest.mark.parametrize("backend", ["sim", "cpu"])
def test_gymnasium_env_checker_passes(backend):
    # sim: two small level-5 problems (the default pool's 1B-class models take 30 s to capture; the spaces,
    # seeding and determinism the checker tests are the same)
    from megakernel_gym.curriculum import Suite, get_problem
    suite = Suite([get_problem("mk_mlp_block"), get_problem("mk_attention_block")]) if backend == "sim" else None
    env = gym.make("MegaKernel-v0", backend=backend, suite=suite)
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_sim_episode_rewards_a_faster_schedule_more(sim_env):
    obs, info = sim_env.reset(seed=1, options={"problem": "mk_mlp_block"})
    assert info["kind"] == "edits" and obs["code"].startswith("mkir v1")
    assert "predicted" in obs["feedback"] and info["turns"] == 20
    _, good, term, trunc, info = sim_env.step(FUSED_MLP)
    assert info["eval"]["status"] == "correct" and info["eval"]["speedup"] > 1.0
    assert "into=silu_mul" in sim_env.code
    sim_env.reset(seed=1, options={"problem": "mk_mlp_block"})
    _, bad, _, _, info_bad = sim_env.step(SLOWER_MLP)
    assert info_bad["eval"]["speedup"] < 1.0
    _, invalid, _, _, info_inv = sim_env.step("tile * n=32")
    # from the default schedule (score 0): faster earns more than 0, slower less, a refused edit the
    # failure score minus the slower one's
    assert good > 0.0 > bad > invalid == pytest.approx(-1.0 - bad)
    assert info_inv["eval"]["status"] == "compile_error" and "tile size 32" in info_inv["eval"]["reason"]
    _, again, _, _, _ = sim_env.step("counter silu_mul op")
    assert again > 0.0                    # back from the refusal
    # improvement rewards telescope: submit earns the best minus the last, the return is the best minus 0
    _, r, term, trunc, _ = sim_env.step("submit")
    assert term and not trunc and r == pytest.approx(sim_env.best - (bad + invalid + again))
    assert sum(sim_env.rewards) == pytest.approx(sim_env.best)
    with pytest.raises(gym.error.ResetNeeded):
        sim_env.step("tile gate_proj n=64")


def test_cpu_episode_reference_kernel_beats_wrong_and_invalid(cpu_env):
    obs, info = cpu_env.reset(seed=0, options={"problem": "softmax"})
    assert info["kind"] == "code" and "class Model" in obs["problem"] and info["turns"] == 10
    ref = reference_candidates("softmax")["triton"].source
    _, r_invalid, _, _, inv = cpu_env.step("here is my kernel: (none)")
    o_wrong, r_wrong, _, _, wrong = cpu_env.step("```python\n" + ref.replace("* inv_sum", "* inv_sum * 1.01")
                                                 + "\n```")
    _, r_good, _, _, good = cpu_env.step("Sure:\n```python\n" + ref + "\n```\n")
    assert inv["eval"]["status"] == "compile_error" and "no kernel code" in inv["eval"]["reason"]
    assert wrong["eval"]["status"] == "incorrect" and "failed on seed0:plain" in o_wrong["feedback"]
    assert good["eval"]["status"] == "correct"
    # improvement rewards: 0 for nothing better, then the steps up the tiers to correct (score 0 on cpu)
    assert (r_invalid, r_wrong, r_good) == (0.0, 0.5, 0.5)
    assert good["best_score"] == 0.0
    text = cpu_env.render()
    assert "softmax" in text and "--- feedback ---" in text and "ModelNew" in text
    assert "## Your move" in good["prompt"]


def test_cpu_megakernel_episode_runs_the_plan_in_the_vm(cpu_env):
    obs, info = cpu_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    _, r, _, _, info = cpu_env.step(FUSED_MLP)
    assert info["eval"]["status"] == "correct" and info["eval"]["backend"] == "cpu"
    assert info["eval"]["speedup"] is None and "CPU VM matches" in info["eval"]["reason"]
    assert r == 0.0        # correct without timing scores 0, as the default schedule it starts from


def test_impl_edits_off_the_gpu_are_compiled_for_feedback(sim_env):
    """On sim (and cpu) an `impl` body is compiled with NVRTC: one that does not compile is a
    compile_error carrying the compiler's message, one that does is `not_run` (compiled, never run:
    bodies are scored on the gpu backend only), which earns nothing; a forbidden one never reaches
    the compiler."""
    from test_codegen import SILU_MUL_BODY
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    _, r, _, _, info = sim_env.step("impl silu_mul <<<out[lo] = no_such_name;>>>")
    assert info["eval"]["status"] == "compile_error" and r == -1.0
    assert "no_such_name" in info["eval"]["reason"] and "NVRTC" in info["eval"]["reason"]
    _, r, _, _, info = sim_env.step('impl silu_mul <<<asm("trap;");>>>')
    assert info["eval"]["status"] == "compile_error" and "may not have inline assembly" in info["eval"]["reason"]
    _, r, _, _, info = sim_env.step(f"impl silu_mul <<<{SILU_MUL_BODY}>>>")
    assert info["eval"]["status"] == "not_run" and r == 0.0, info["eval"]["reason"]   # -1 after -1
    assert "compiled, not run: impl bodies are scored on the gpu backend only" in info["eval"]["reason"]
    assert "impl silu_mul <<<" in sim_env.code and "tile [lo, hi)" in sim_env._statement()


def test_impl_feedback_off_the_gpu_is_not_held_up_by_the_optimizer(sim_env, tmp_path, monkeypatch):
    """Off the GPU a body is compiled to PTX unoptimized, for its errors only: a red team's nest of
    constant loops, which NVRTC's optimizer unrolls for a minute (7.6k characters past the 60 s limit,
    every sim step), is answered in seconds as not_run without writing to the kernel cache, and a body
    with an error still gets NVRTC's message naming it."""
    import time

    monkeypatch.setenv("MKGYM_CUDA_CACHE", str(tmp_path))
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    nest = ("for (int a = 0; a < 8; ++a) for (int b = 0; b < 8; ++b) for (int c = 0; c < 8; ++c) "
            "for (int d = 0; d < 8; ++d) { acc[(a*8+b+c*3+d)%64] += bf2f(in0[(a*512+b*64+c*8+d)%2048]) * 1.0001f; }\n")
    body = ("float acc[64];\nfor (int i = 0; i < 64; ++i) acc[i] = 0.0f;\n" + nest * 40
            + "for (int i = lo; i < hi; ++i) out[i] = f2bf(acc[i % 64]);")
    t0 = time.perf_counter()
    _, _, _, _, info = sim_env.step(f"impl silu_mul <<<{body}>>>")
    assert info["eval"]["status"] == "not_run", info["eval"]["reason"]
    assert time.perf_counter() - t0 < 20          # about 1 s here; 60 s (the limit) optimized
    assert not any(tmp_path.iterdir())            # nothing cached: no cubin was made
    _, _, _, _, info = sim_env.step("impl silu_mul <<<float acc = 0.0f; acc.x = 1; out[lo] = f2bf(acc);>>>")
    assert info["eval"]["status"] == "compile_error" and "NVRTC" in info["eval"]["reason"]
    assert "acc" in info["eval"]["reason"], info["eval"]["reason"]


def test_bad_actions_get_feedback_and_the_env_keeps_working(cpu_env, sim_env):
    cpu_env.reset(seed=0, options={"problem": "softmax"})
    for action, needle in [("", "empty"), ("   \n", "empty"), (b"\x00\xff", "an action is text"),
                           ("x" * 10_000_000, "limit is"), ("\x00junk", "NUL"),
                           ("```python\nclass ModelNew:  # \ud800\n    pass\n```", "lone surrogate"),
                           ("```python\nimport torch\n```", "no ModelNew"),
                           ("tile lm_head n=64", "no kernel code")]:
        obs, r, term, trunc, info = cpu_env.step(action)
        assert r == 0.0 and not term, action[:20]
        assert needle in info["eval"]["reason"], (needle, info["eval"]["reason"])
        assert cpu_env.observation_space.contains(obs)
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    obs, r, _, _, info = sim_env.step("```python\nclass ModelNew(nn.Module):\n    pass\n```")
    assert "not a ModelNew" in info["eval"]["reason"] and r == -1.0      # the failure score, from the default's 0
    obs, r, _, _, info = sim_env.step("\u00e9\u00e8 non-ascii \u2603 edit")
    assert sim_env.observation_space.contains(obs)
    # a lone surrogate (red team 8: it raised out of step, from the hash of the text)
    obs, r, _, _, info = sim_env.step("counter norm op  # \udfff")
    assert info["eval"]["category"] == "bad_action" and "U+DFFF" in info["eval"]["reason"]
    assert sim_env.observation_space.contains(obs)


def test_a_candidate_with_a_lone_surrogate_is_a_compile_error_not_a_crash(cpu_judge):
    from megakernel_gym.curriculum import get_problem, reference_candidates
    src = reference_candidates("softmax")["triton"].source + "\n# \ud800\n"
    res = cpu_judge.evaluate(get_problem("softmax"), src)
    assert res.status == "compile_error" and "lone surrogate (U+D800)" in res.reason


def test_the_same_kernel_or_schedule_again_gets_its_result_again_not_a_fresh_timing(sim_env, cpu_env, monkeypatch):
    """An episode judges each kernel or schedule text once: sent again (or reached again by other edits) it
    gets the earlier turn's result, so a policy cannot collect the best of many GPU timings of one schedule
    (a sixth red team's farm: 20 turns of one schedule, the best draw kept). A changed one is judged."""
    from megakernel_gym.env import megakernel as mk_env
    from megakernel_gym.rewards import EvalResult
    calls = []
    real = mk_env._Megakernel.score
    monkeypatch.setattr(mk_env._Megakernel, "score", lambda self, *a: calls.append(a[2]) or real(self, *a))
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    _, r1, _, _, i1 = sim_env.step("prefetch gate_proj depth=1")
    _, r2, _, _, i2 = sim_env.step("prefetch gate_proj depth=1")   # the same edit again: the same schedule
    _, _, _, _, i3 = sim_env.step("prefetch gate_proj depth=0")    # a new one
    _, _, _, _, i4 = sim_env.step("prefetch gate_proj depth=1")    # back to turn 1's schedule
    assert len(calls) == 2 and len(set(calls)) == 2, calls
    assert "the same schedule as turn 1: its result then, not judged again" in i2["eval"]["reason"]
    assert i4["eval"]["reason"].startswith("the same schedule as turn 1") and i3["eval"]["reason"] != i1["eval"]["reason"]
    assert r1 != 0 and r2 == 0.0 and i2["eval"]["speedup"] == i1["eval"]["speedup"]

    class CountingJudge:                                        # kernel code: what reaches the judge
        def __init__(self):
            self.seen = []

        def evaluate(self, problem, cand):
            self.seen.append(cand.sha256)
            return EvalResult(status="correct", reason="judged", problem=problem.name, backend="cpu",
                              candidate_sha256=cand.sha256, problem_sha256=problem.sha256, speedup=1.0)
    judge = CountingJudge()
    monkeypatch.setattr(cpu_env, "_get_judge", lambda: judge)
    cpu_env.reset(seed=0, options={"problem": "softmax"})
    ref = reference_candidates("softmax")["triton"].source
    infos = [cpu_env.step("```python\n" + src + "\n```")[4] for src in (ref, ref, ref + "\n# a comment\n")]
    assert len(judge.seen) == 2, judge.seen                     # the repeat is not judged; a changed text is
    assert infos[1]["eval"]["reason"] == "the same kernel as turn 1: its result then, not judged again. judged"
    assert infos[2]["eval"]["reason"] == "judged"


@pytest.mark.parametrize("mode", ["improvement", "best", "score", "kevin"])
def test_a_kernel_resent_with_its_text_changed_earns_nothing_from_a_faster_draw(mode, monkeypatch):
    """On the GPU a kernel whose text changed (a comment) is timed again, a fresh draw of the noise; a draw
    within the margin above the best is not credited, and under score and kevin submit pays no more than
    the best credited a turn, so sending one kernel until it draws fast and then submitting earns what its
    first timing did. A kernel faster past the margin is credited."""
    from megakernel_gym.rewards import EvalResult
    draws = iter([1.500, 1.512, 1.526, 1.60])                  # the same kernel three times, then a faster one

    class NoisyGPU:
        def evaluate(self, problem, cand):
            return EvalResult(status="correct", reason="timed", problem=problem.name, backend="gpu",
                              candidate_sha256=cand.sha256, problem_sha256=problem.sha256, speedup=next(draws))
    env = MegaKernelEnv(backend="cpu", reward=mode)
    monkeypatch.setattr(env, "_get_judge", lambda: NoisyGPU())
    env.reset(seed=0, options={"problem": "softmax"})
    ref = reference_candidates("softmax")["triton"].source
    rewards = [env.step("```python\n" + ref + "\n# take %d\n```" % i)[1] for i in range(3)]
    assert env.best == pytest.approx(math.log(1.5)) and env.best_result.speedup == 1.5
    _, r_submit, _, _, _ = env.step("submit")
    ret = sum(rewards) + r_submit
    left = env.turns - 3
    if mode in ("improvement", "best"):
        assert ret == pytest.approx(math.log(1.5) + 1.0)              # the first draw minus the start (-1)
    elif mode == "score":                   # the draws as they came, then 1.5's score for each turn left
        assert r_submit == pytest.approx(math.log(1.5) * left)
    else:
        assert r_submit == pytest.approx((0.3 + 1.5) * (1 - 0.4 ** left) / 0.6)
    env.reset(seed=0, options={"problem": "softmax"})
    draws = iter([1.500, 1.60])
    env.step("```python\n" + ref + "\n```")
    env.step("```python\n" + ref + "\n# faster\n```")
    assert env.best == pytest.approx(math.log(1.6)) and env.best_result.speedup == 1.6
    env.close()


def test_turn_limit_truncates(sim_env):
    sim_env.reset(seed=0, options={"problem": "mk_mlp_block"})
    for i in range(sim_env.turns):
        _, _, term, trunc, _ = sim_env.step("tile * n=32")
    assert trunc and not term and "turn limit" in sim_env.last


def test_reset_options_and_errors(sim_env, cpu_env):
    o1, i1 = cpu_env.reset(seed=123)
    o2, i2 = cpu_env.reset(seed=123)
    assert i1["problem"] == i2["problem"] and o1 == o2 and i1["level"] == 1
    assert cpu_env.reset(seed=0, options={"level": 2})[1]["level"] == 2
    with pytest.raises(Exception, match="no problem 'nope'"):
        cpu_env.reset(options={"problem": "nope"})
    with pytest.raises(ValueError, match="cannot be scored on the sim backend"):
        sim_env.reset(options={"problem": "softmax"})
    with pytest.raises(ValueError, match="unknown reset option"):
        sim_env.reset(options={"probelm": "softmax"})
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        MegaKernelEnv(backend="tpu")
    with pytest.raises(ValueError, match="unknown reward"):
        MegaKernelEnv(backend="sim", reward="speed")


def test_kevin_rewards_and_discounted_returns():
    env = MegaKernelEnv(backend="sim", reward="kevin")
    env.reset(seed=0, options={"problem": "mk_mlp_block"})
    _, r, _, _, info = env.step(FUSED_MLP)
    assert r == pytest.approx(0.3 + info["eval"]["speedup"])
    assert discounted_returns([1.0, 0.0, 2.0], gamma=0.4) == pytest.approx([1.0 + 0.4 * 0.0 + 0.16 * 2.0, 0.8, 2.0])
    env.close()


def test_rgb_array_renders_the_schedule_timeline():
    env = gym.make("MegaKernel-v0", backend="sim", render_mode="rgb_array")
    env.reset(seed=0, options={"problem": "mk_mlp_block"})
    before = env.render()
    env.step(SLOWER_MLP)          # half the SMs: the right half of the rows stays idle
    after = env.render()
    env.close()
    assert before.shape == after.shape and before.dtype.name == "uint8" and before.shape[2] == 3
    rows = before.shape[0] // 132
    idle = (235, 235, 235)
    last_sm = after[131 * rows, :, :]
    assert (last_sm == idle).all(axis=-1).all()          # SM 131 got no task
    assert not (before[131 * rows, :, :] == idle).all(axis=-1).all()


def test_demo_command_runs_an_episode_and_saves_the_timeline(tmp_path):
    import json
    out = tmp_path / "timeline.png"
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "demo", "--json", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["backend"] == "sim" and summary["problem"] == "mk_mlp_block"
    rewards = [t["reward"] for t in summary["turns"]]
    assert rewards[0] > 0.0 and summary["turns"][2]["speedup"] < 1.0 and summary["turns"][-1]["status"] == "submitted"
    assert summary["return"] == pytest.approx(summary["best_score"])   # the start, the default schedule, scores 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "-- reward" in r.stderr


def test_vector_env_judges_kernels_together_and_autoresets():
    envs = gym.make_vec("MegaKernel-v0", num_envs=2, vectorization_mode="vector_entry_point", backend="cpu")
    try:
        obs, infos = envs.reset(seed=0, options={"problem": "softmax"})
        assert len(obs["problem"]) == 2 and list(infos["problem"]) == ["softmax", "softmax"]
        ref = reference_candidates("softmax")["triton"].source
        wrong = ref.replace("* inv_sum", "* inv_sum * 1.01")
        obs, rewards, terms, truncs, infos = envs.step(["```python\n" + ref + "\n```", "```python\n" + wrong + "\n```"])
        statuses = list(infos["eval"]["status"])
        assert statuses == ["correct", "incorrect"] and rewards[0] > rewards[1] > 0
        assert "correct on 6 seeds" in obs["feedback"][0]
        obs, rewards, terms, truncs, infos = envs.step(["submit", "more nonsense"])
        assert terms.tolist() == [True, False] and rewards.tolist() == [0.0, -0.5]   # incorrect, then no kernel
        # next step: env 0 starts a new episode (its action ignored), env 1 goes on
        obs, rewards, terms, truncs, infos = envs.step(["ignored", "submit"])
        assert infos["turn"].tolist() == [0, 3] and terms.tolist() == [False, True]
        assert "no kernel yet" in obs["feedback"][0]
    finally:
        envs.close()


def test_vector_env_on_sim_scores_edits():
    envs = gym.make_vec("MegaKernel-v0", num_envs=3, vectorization_mode="vector_entry_point", backend="sim")
    try:
        envs.reset(seed=0, options={"problem": "mk_mlp_block"})
        _, rewards, _, _, infos = envs.step([FUSED_MLP, SLOWER_MLP, "tile * n=32"])
        assert rewards[0] > 0.0 > rewards[1] > rewards[2] == -1.0
    finally:
        envs.close()


def test_pictures_tell_what_ran(tmp_path):
    """A matmul fused into its elementwise consumer is drawn as a matmul (the task's op is the consumer,
    its time is the matmul's); the demo saves the default schedule above the best, on one time axis;
    an op-level episode that timed nothing says so in words instead of a blank picture."""
    import numpy as np

    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.env.demo import run_demo
    from megakernel_gym.env.timeline import BACKGROUND, task_kinds, times_image
    from megakernel_gym.ir_exposure import apply_edits, make_ir
    g = capture(*ZOO["mlp-tiny"](), "mlp-tiny")
    fused = apply_edits(make_ir(g, num_sms=8), "fuse gate_proj into silu_mul\nfuse up_proj into silu_mul").plan()
    kinds = task_kinds(fused)
    silu = [k for t, k in zip(fused.tg.tasks, kinds) if t.op.endswith("silu_mul")]
    assert silu and set(silu) == {"matmul"}
    import io
    out = tmp_path / "pics" / "t.png"
    summary = run_demo("mk_mlp_block", "sim", str(out), log=io.StringIO())
    from PIL import Image
    both = np.asarray(Image.open(out))
    assert summary["picture"] == str(out) and both.shape[0] > 1.9 * 700   # two 132-SM panels with margins
    assert summary["best_score"] > 0
    empty = times_image(None)
    assert (empty != np.array(BACKGROUND, dtype=np.uint8)).any(axis=-1).sum() > 100   # the words


def test_timeline_with_axes_adds_title_axis_and_legend():
    """The saved timeline (mkgym demo, bench/megakernel.py) has a margin for the title, the time axis
    and a legend; the plot itself is the rgb_array picture, unchanged, inside it."""
    import numpy as np

    from megakernel_gym.compiler import ZOO, capture, predict
    from megakernel_gym.env.timeline import IDLE, timeline_image, with_axes
    from megakernel_gym.ir_exposure import make_ir
    g = capture(*ZOO["mlp-tiny"](), "mlp-tiny")
    plan = make_ir(g, num_sms=8).plan()
    pred = predict(plan, "H100")
    img = timeline_image(plan, pred, width=400)
    out = with_axes(img, plan, pred, "mlp-tiny")
    assert out.shape[0] > img.shape[0] + 40 and out.shape[1] > img.shape[1] and out.dtype == np.uint8
    assert (out[34:34 + img.shape[0], 56:56 + img.shape[1]] == img).all()       # pasted as it is
    below = out[34 + img.shape[0]:]
    assert (below == np.array(IDLE, dtype=np.uint8)).all(axis=-1).any()         # the legend's idle swatch
    assert (below < 100).all(axis=-1).sum() > 100                                # axis ticks and labels


def test_timeline_draws_the_launch_so_the_bars_end_at_the_predicted_latency():
    """predict's latency is the last task's finish plus the kernel's launch: the demo draws the launch
    first on every SM, so the last bar ends at the latency its title names (it ended a launch short)."""
    import numpy as np

    from megakernel_gym.compiler import ZOO, capture, predict
    from megakernel_gym.env.timeline import IDLE, LAUNCH, timeline_image
    from megakernel_gym.ir_exposure import make_ir
    g = capture(*ZOO["mlp-tiny"](), "mlp-tiny")
    plan = make_ir(g, num_sms=8).plan()
    pred = predict(plan, "H100")
    launch = pred.latency_us - max(pred.finish_us)
    assert launch > 0
    width = 1000
    img = timeline_image(plan, pred, width=width, launch_us=launch, end_us=2 * pred.latency_us)
    rows = img[::5]                                          # one pixel row per SM
    assert (rows[:, 0] == np.array(LAUNCH, dtype=np.uint8)).all()
    drawn = ~(rows == np.array(IDLE, dtype=np.uint8)).all(axis=-1)
    last = int(np.nonzero(drawn.any(axis=0))[0].max())
    assert abs(last - pred.latency_us * (width - 1) / (2 * pred.latency_us)) <= 2   # ends at the latency
    plain = timeline_image(plan, pred, width=width)          # as before: tasks alone, no launch colour
    assert not (plain == np.array(LAUNCH, dtype=np.uint8)).all(axis=-1).any()


def test_feedback_figures_are_readable():
    """No 'None' and no 0.0 for a small figure in what the agent reads (a tiny model's floor on the cpu backend)."""
    from megakernel_gym.ir_exposure.observe import feedback
    from megakernel_gym.rewards import EvalResult
    bad = EvalResult(status="incorrect", reason="seed0: output has shape (2,), expected (3,)", problem="p",
                     backend="cpu", candidate_sha256="", seeds=[{"label": "seed0:plain", "ok": False}])
    text = feedback(bad, 1, 10, -0.5, 0.5)
    assert "None" not in text and "failed on seed0:plain: see the reason above" in text
    ok = EvalResult(status="correct", reason="x", problem="p", backend="cpu", candidate_sha256="",
                    timing={"predicted_us": 0.0412, "floor_us": 0.00931})
    text = feedback(ok, 1, 10, 0.0, 0.0)
    assert "predicted: 0.0412 us (bandwidth/compute floor 0.00931 us, 23% of it)" in text


def test_reset_can_draw_from_another_suite_by_name(cpu_env, sim_env, tmp_path, monkeypatch):
    """env.reset(options={"suite": NAME, "level": N}) draws a problem of that suite at that level (or
    {"suite": NAME, "problem": P} names one), as `--suite` does on the command line; the curriculum's
    own suite and level stay as they were. A level the backend cannot score is refused with why."""
    kb = tmp_path / "kb"
    for level, name, body in ((1, "1_Tanh", "torch.tanh(x)"), (2, "1_TanhScale", "torch.tanh(x) * 3.0 - x")):
        (kb / f"level{level}").mkdir(parents=True, exist_ok=True)
        (kb / f"level{level}" / f"{name}.py").write_text(
            "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
            f"        return {body}\n\ndef get_inputs():\n    return [torch.randn(64)]\n\n"
            "def get_init_inputs():\n    return []\n")
    monkeypatch.setenv("MKGYM_KERNELBENCH", str(kb))
    before = (cpu_env.curriculum.suite, cpu_env.curriculum.level)
    cpu_env.reset(seed=0, options={"suite": "kernelbench", "level": 2})
    assert cpu_env.problem.name == "level2/1_TanhScale"
    cpu_env.reset(seed=0, options={"suite": str(kb), "problem": "level1/1_Tanh"})
    assert cpu_env.problem.name == "level1/1_Tanh"
    assert (cpu_env.curriculum.suite, cpu_env.curriculum.level) == before
    with pytest.raises(ValueError, match="no problems at level 3 that the cpu backend can score .*levels \\[1, 2\\]"):
        cpu_env.reset(options={"suite": "kernelbench", "level": 3})
    with pytest.raises(ValueError, match="no level-5 megakernels, the only problems the sim backend scores"):
        sim_env.reset(options={"suite": "kernelbench", "level": 1})
    with pytest.raises(ValueError, match="level1/1_Tanh.*cannot be scored on the sim backend"):
        sim_env.reset(options={"suite": "kernelbench", "problem": "level1/1_Tanh"})
    with pytest.raises(ValueError, match="must be a suite name or path"):
        cpu_env.reset(options={"suite": 3})
    with pytest.raises(ValueError, match="unknown reset option"):
        cpu_env.reset(options={"suit": "kernelbench"})
    cpu_env.reset(seed=0, options={"problem": "softmax"})       # the curriculum's own suite again
