"""policies/train.py and `mkgym train grpo`: a tiny model trained offline with TRL's GRPOTrainer,
rewarded by the env; and the clear errors for bad models and configs."""
import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("trl")

from megakernel_gym.policies.train import EnvReward, TrainConfigError, load_config, train_grpo  # noqa: E402

TINY_CONFIG = """
problems = ["mk_mlp_block"]
repeat = 4
max_steps = 2
num_generations = 2
per_device_train_batch_size = 2
max_completion_length = 12
learning_rate = 1e-4
save_strategy = "steps"
save_steps = 2
"""


def _train_tiny(tmp_path, cfg, *extra):
    """`mkgym train grpo --tiny` in a fresh process, W&B left to its default (offline: no key here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRL_", "PYTHONWARNINGS"))}
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "train", "grpo", "--tiny", str(tmp_path / "tiny"),
                        "--config", str(cfg), "--out", str(tmp_path / "run"), "--json", *extra],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_grpo_trains_a_tiny_model_offline_end_to_end(tmp_path):
    """The README's command: a tiny GPT-2 made on the spot, two GRPO steps on CPU, W&B offline, a
    checkpoint written; the rewards in the log are the env's (a random model's text fails to parse,
    the failure tier)."""
    cfg = tmp_path / "grpo.toml"
    cfg.write_text(TINY_CONFIG)
    r = _train_tiny(tmp_path, cfg)
    summary = json.loads(r.stdout)
    assert summary["steps"] == 2 and summary["last_reward"] == pytest.approx(-1.0)
    rewarded = [h for h in summary["log_history"] if "rewards/env_reward/mean" in h]
    assert len(rewarded) == 2 and all("env/pass_rate" in h and "env/L5/pass_rate" in h for h in rewarded)
    assert (tmp_path / "run" / "checkpoint-2").is_dir()
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "W&B ran offline beside the checkpoints"


def test_env_reward_scores_completions_like_the_env(tmp_path):
    """Edits scored on the sim, kernels judged together on the pool (cpu), and the best megakernel's
    timeline saved beside the run."""
    from test_env import FUSED_MLP
    from megakernel_gym.curriculum import reference_candidates
    logged = {}
    reward = EnvReward("sim", out_dir=tmp_path)
    try:
        got = reward(prompts=["p"] * 3, completions=[FUSED_MLP, "tile * n=32", ""],
                     problem=["mk_mlp_block"] * 3)
    finally:
        reward.close()
    # a faster schedule (reward ln(speedup): the sim predicts about 1.10x; the GPU measured such MLP
    # fusions at 1.15x, bench/results/leaderboard_gpu.json), a bad edit, nothing
    assert got[0] > math.log(1.05) and got[1] == -1.0 and got[2] == -1.0
    assert reward.seen == 3 and reward.correct == 1
    # an edit that changes nothing is correct but not a pass (the logged pass rate), and `submit` as the
    # one action earns the start's score, one turn's worth: the default schedule's 0 here, and the failure
    # tier on kernel code (not -1 for each of its ten turns)
    reward = EnvReward("sim")
    try:
        got = reward(prompts=["p"] * 2, completions=["counter norm op", "submit"], problem=["mk_mlp_block"] * 2,
                     log_metric=lambda k, v: logged.__setitem__(k, v))
    finally:
        reward.close()
    assert got == [0.0, 0.0] and reward.correct == 0 and logged["env/L5/pass_rate"] == 0.0
    from PIL import Image
    assert Image.open(tmp_path / "best_megakernel_timeline.png").size[0] > 100
    ref = "```python\n" + reference_candidates("softmax")["triton"].source + "\n```"
    reward = EnvReward("cpu")
    try:
        got = reward(prompts=["p"] * 3, completions=[ref, "```python\nimport os\n```", ref],
                     problem=["softmax", "softmax", "rmsnorm"])
    finally:
        reward.close()
    assert got[0] == 0.0 and got[1] == -1.0 and -1.0 < got[2] < 0   # correct (cpu: no speedup), no kernel, wrong
    assert len(reward.envs) == 4 and reward.correct == 1          # one env per kernel, one batch on the pool
    reward = EnvReward("cpu")
    try:
        assert reward(prompts=["p"], completions=["submit"], problem=["softmax"]) == [-1.0]
    finally:
        reward.close()


def test_the_curriculum_counts_a_pass_as_the_logged_rates_do():
    """Red team 20: every schedule the validator takes is correct, so a no-op or slower level-5 edit counted as a
    solve in the curriculum (its pass rates, promotion and the sampler's weights), though not in env/pass_rate."""
    from test_env import FUSED_MLP
    from megakernel_gym.curriculum.curriculum import Curriculum
    cur = Curriculum()
    reward = EnvReward("sim", curriculum=cur)
    try:
        reward(prompts=["p"] * 3, completions=["counter norm op", "submit", FUSED_MLP], problem=["mk_mlp_block"] * 3)
    finally:
        reward.close()
    assert reward.correct == 1 and list(cur.stats["mk_mlp_block"]) == [3, 1]


def test_a_level5_pass_on_the_gpu_clears_the_timings_noise():
    """A level-5 schedule passes (the logged rates, the curriculum) only faster than the default; on the gpu
    backend by more than the margin a new best must clear (reward_fns.CREDIT_MARGIN["edits"], or three of the
    timing's own standard errors): a no-op's 1.005x is noise there, an exact 1.005x in the sim is not."""
    edits = {"kind": "edits"}

    def ev(backend, sp, rse=None):
        return {"correct": True, "backend": backend, "speedups": {"default_schedule": sp},
                "timing": {"rel_stderr": rse} if rse is not None else {}}
    assert EnvReward._passed(ev("sim", 1.005), edits) and not EnvReward._passed(ev("sim", 0.99), edits)
    assert not EnvReward._passed(ev("gpu", 1.005), edits) and EnvReward._passed(ev("gpu", 1.02), edits)
    assert not EnvReward._passed(ev("gpu", 1.02, rse=0.01), edits)            # its own noise raises the bar
    assert EnvReward._passed(ev("gpu", 0.5), {"kind": "code"})                # kernel code: correct is a pass
    assert not EnvReward._passed(dict(ev("gpu", 2.0), correct=False), edits)


def test_bad_models_and_configs_are_named(tmp_path):
    with pytest.raises(TrainConfigError, match="unknown config key 'learnin_rate'.*learning_rate"):
        load_config({"learnin_rate": 1e-4})
    with pytest.raises(TrainConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("max_steps = [")
    with pytest.raises(TrainConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(TrainConfigError, match="model path .* does not exist"):
        train_grpo(str(tmp_path / "no_model"), {"max_steps": 1})
    with pytest.raises(TrainConfigError, match="unknown pool 'slurm'.*the config's `pool`"):
        train_grpo(str(tmp_path), {"pool": "slurm", "problems": ["mk_mlp_block"]}, out_dir=tmp_path / "r")
    with pytest.raises(TrainConfigError, match="no problems"):
        from megakernel_gym.policies.train import prompt_dataset
        prompt_dataset(load_config({"levels": [2], "backend": "sim"})[0])


def test_multi_turn_tools_drive_the_env():
    """The environment_factory class: the row's problem on reset, apply_edit/submit_kernel as tools
    (their docstrings are the tool schemas TRL renders), get_reward the episode's best score."""
    import inspect

    from megakernel_gym.policies.train import tool_env_class
    from test_env import FUSED_MLP
    cls = tool_env_class("sim")
    tools = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")]
    assert sorted(tools) == ["apply_edit", "get_reward", "reset", "submit_kernel"]
    env = cls()
    assert env.reset(problem="mk_mlp_block", prompt="...") is None
    assert env.get_reward() == 0.0          # a level-5 episode starts from the default schedule's score
    assert "tile size 32" in env.apply_edit("tile * n=32")           # refused: said why, the env goes on
    assert env.get_reward() == 0.0
    fb = env.apply_edit(FUSED_MLP)
    assert fb.startswith("turn 2/20: correct") and "speedup vs the best baseline" in fb
    best = env.get_reward()
    assert best > math.log(1.05)                                    # predicted at least 5% faster
    assert "compile_error" in env.submit_kernel("x = 1")            # kernel code in an IR-edit episode: refused
    assert env.get_reward() == best                                  # the best so far, not the last


def test_multi_turn_grpo_end_to_end_and_its_chat_template_check(tmp_path):
    from megakernel_gym.policies.tiny import make_tiny_model
    cfg = tmp_path / "mt.toml"
    cfg.write_text(TINY_CONFIG.replace("max_steps = 2", "max_steps = 1").replace('save_strategy = "steps"', "")
                   .replace("save_steps = 2", "") + "multi_turn = true\n")
    r = _train_tiny(tmp_path, cfg)
    hist = [h for h in json.loads(r.stdout)["log_history"] if "rewards/MegaKernelTools/mean" in h]
    assert hist and "tools/call_frequency" in hist[0]             # the tool loop ran (a random model calls none)
    plain = make_tiny_model(tmp_path / "plain", ["tile a n=1", "fuse a into b"])
    with pytest.raises(TrainConfigError, match="no chat template"):
        train_grpo(plain, {"multi_turn": True, "problems": ["mk_mlp_block"], "max_steps": 1, "num_generations": 2,
                           "per_device_train_batch_size": 2, "report_to": "none"}, out_dir=tmp_path / "r2")


CURRICULUM_TOML = """
suite = "builtin"
[[levels]]
level = 1
window = 2
min_heldout = 2
promote_pass_rate = 0.5
promote_milestone = "none"
[[levels]]
level = 2
"""


def test_curriculum_promotes_from_the_rewards_and_changes_the_prompts(tmp_path):
    """With a curriculum, the reward function records each outcome; held-out rows are scored and
    recorded but rewarded None (GRPO learns nothing from them); two correct held-out kernels promote
    level 1 -> 2 and the slots the trainer reads next hold level-2 problems."""
    from types import SimpleNamespace

    from megakernel_gym.curriculum import reference_candidates
    from megakernel_gym.policies.train import curriculum_dataset
    (tmp_path / "cur.toml").write_text(CURRICULUM_TOML)
    own = load_config({"curriculum": str(tmp_path / "cur.toml"), "backend": "cpu", "heldout_share": 0.5})[0]
    cur, ds = curriculum_dataset(own)
    assert cur.level == 1 and {ds[i]["level"] for i in range(16)} == {1}
    assert any(ds[i]["heldout"] for i in range(16)) and not all(ds[i]["heldout"] for i in range(16))
    assert ds[3]["problem"] == ds[3]["problem"]                      # a slot read twice: the same draw
    ref = "```python\n" + reference_candidates("rmsnorm")["triton"].source + "\n```"
    metrics = {}
    reward = EnvReward("cpu", curriculum=cur, out_dir=tmp_path)
    try:
        got = reward(prompts=["p"] * 3, completions=[ref, ref, "no kernel"], problem=["rmsnorm", "rmsnorm", "softmax"],
                     heldout=[True, True, False], trainer_state=SimpleNamespace(global_step=7),
                     log_metric=lambda k, v: metrics.__setitem__(k, v))
    finally:
        reward.close()
    assert got[:2] == [None, None] and got[2] == -1.0
    assert cur.level == 2 and cur.promotions[-1]["step"] == 7
    assert metrics["curriculum/level"] == 2.0 and metrics["curriculum/L1/heldout_pass_rate"] == 1.0
    assert {ds[i]["level"] for i in range(16)} <= {1, 2} and any(ds[i]["level"] == 2 for i in range(16))


def test_curriculum_needs_levels_the_backend_scores():
    from megakernel_gym.policies.train import curriculum_dataset
    with pytest.raises(TrainConfigError, match=r"levels \[1, 2, 3, 4\] that the sim backend cannot score"):
        curriculum_dataset(load_config({"curriculum": True, "backend": "sim"})[0])


def test_curriculum_training_saves_its_state_and_resumes(tmp_path):
    """`mkgym train grpo` with a curriculum on the cpu backend: the state rides in each checkpoint,
    and --resume goes on from the last one (the step count and the curriculum's episodes carry on)."""
    (tmp_path / "cur.toml").write_text(CURRICULUM_TOML)
    cfg = tmp_path / "grpo.toml"
    cfg.write_text(TINY_CONFIG.replace('problems = ["mk_mlp_block"]', 'backend = "cpu"\nlevels = [1]')
                   + f'curriculum = "{tmp_path / "cur.toml"}"\n')
    r = _train_tiny(tmp_path, cfg)
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "curriculum.json").read_text())
    hist = json.loads(r.stdout)["log_history"]
    assert any("curriculum/level" in h for h in hist)
    cfg.write_text(cfg.read_text().replace("max_steps = 2", "max_steps = 4"))
    r = _train_tiny(tmp_path, cfg, "--resume")
    summary = json.loads(r.stdout)
    steps = [h for h in summary["log_history"] if "reward" in h]
    # resumed, not retrained: steps 1-2 are the first run's own log entries, restored from checkpoint-2
    assert summary["steps"] == 4 and [h["step"] for h in steps] == [1, 2, 3, 4]
    assert steps[:2] == [h for h in hist if "reward" in h]
    after = json.loads((tmp_path / "run" / "checkpoint-4" / "curriculum.json").read_text())
    assert after["episodes"] > state["episodes"] > 0


def test_quickstart_prints_a_line_a_step_and_saves_its_curve(tmp_path):
    """`mkgym train quickstart`: the shipped config (two steps here, one small problem), one line a step and no
    completion tables, the curve as JSON and a PNG, W&B offline in the run folder and quiet (no banner, no
    history at the end: one line naming the run), no library warnings a user cannot act on; the trained
    policy saved in the run folder, which `mkgym export --run` plays (the sim judged no kernels)."""
    from megakernel_gym.policies.quickstart import SHIPPED_CONFIG, load_quickstart_config
    own, grpo = load_quickstart_config(None)
    assert SHIPPED_CONFIG.is_file() and grpo["max_steps"] >= 20 and own["problems"]
    cfg = tmp_path / "q.toml"
    cfg.write_text(SHIPPED_CONFIG.read_text().replace('problems = ["mk_mlp_block", "mk_llama_decode"]',
                                                      'problems = ["mk_mlp_block"]')
                   .replace("per_device_train_batch_size = 16", "per_device_train_batch_size = 4")
                   .replace("num_generations = 8", "num_generations = 4"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRL_", "PYTHONWARNINGS"))}
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "train", "quickstart", "--config", str(cfg),
                        "--out", str(tmp_path / "run"), "--steps", "2"], capture_output=True, text=True, timeout=600,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]
    assert len(steps) == 2 and "reward" in steps[0] and "best speedup" in steps[0], r.stdout[-2000:]
    assert "{'loss'" not in r.stdout and "completions" not in r.stdout.lower()
    curve = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert [c["step"] for c in curve["curve"]] == [1, 2] and all(math.isfinite(c["reward"]) for c in curve["curve"])
    assert (tmp_path / "run" / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    noise = ("Warning", "wandb:", "Run history", "Loading weights", "Writing model shards", "[INFO]")
    assert not [n for n in noise if n in r.stdout + r.stderr], (r.stdout[-2000:], r.stderr[-3000:])
    assert "W&B run saved offline in" in r.stdout and "mkgym export --run" in r.stdout
    assert (tmp_path / "run" / "policy" / "config.json").is_file() and curve["policy"].endswith("policy")
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "export", "--run", "run", "--out", "mk/", "--json"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    index = json.loads(r.stdout)
    assert [k["problem"] for k in index["schedules"]] == ["mk_mlp_block"] and index["model"] == "run/policy"


def test_quickstart_curve_ticks():
    """The reward curve's x axis has ticks at whole, round steps (one tick at 40 alone read as one step)."""
    from megakernel_gym.policies.quickstart import nice_step
    assert [nice_step(n) for n in (1, 2, 9, 10, 11, 40, 200, 1000)] == [1, 1, 1, 1, 2, 5, 20, 100]
