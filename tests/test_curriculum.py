"""The problem suite, the checker, the loaders and the curriculum (issue: curriculum/)."""
import json
import subprocess
import sys
import textwrap

import pytest

from megakernel_gym.curriculum import (Suite, SuiteError, builtin_suite, load_dataset_suite, load_kernelbench_dir,
                                       load_suite, split_of)
from megakernel_gym.curriculum.check import check_problem
from megakernel_gym.curriculum.curriculum import Curriculum, CurriculumConfig, CurriculumError, Outcome
from megakernel_gym.rewards import Problem

# ---------------------------------------------------------------------------------------------
# problem files written by the tests

HEADER = "import torch\nimport torch.nn as nn\n"


def problem_src(forward: str, inputs: str = "[torch.randn(13, 37)]", init: str = "", extra: str = "",
                args: str = "x") -> str:
    body = textwrap.indent(textwrap.dedent(init), "        ") if init.strip() else "        pass"
    return (HEADER + extra + "\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"{body}\n\n    def forward(self, {args}):\n        return {forward}\n\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n")


SCALE_ADD = problem_src("x * 2.0 + 1.0")

SCALE_ADD_TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _scale_add[(triton.cdiv(n, 128),)](x, y, n, BLOCK=128)
        return y
'''

# One weak problem per filter, and the check that must refuse it.
WEAK = {
    "near_zero": (problem_src("x * 1e-7"), "not_near_zero"),
    "constant": (problem_src("torch.ones_like(x) + 1e-9 * x"), "not_constant"),
    "unused_input": (problem_src("torch.tanh(x) * 3", inputs="[torch.randn(13, 37), torch.randn(13, 37)]",
                                 args="x, y"), "uses_input"),
    "negligible_bias": (problem_src("self.fc(x)", init="self.fc = nn.Linear(37, 29)\n"
                                    "with torch.no_grad():\n    self.fc.bias.mul_(1e-7)"), "uses_weight"),
    "random_output": (problem_src("x + torch.rand_like(x)"), "deterministic"),
    "tight_tolerance": (problem_src("torch.cumsum(x, dim=-1)", inputs="[torch.randn(13, 4000)]",
                                    extra="ATOL = 1e-9\nRTOL = 1e-9\n"), "tolerance_calibrated"),
    "overflows_when_scaled": (problem_src("torch.exp(x * 8.0)"), "finite"),
}


@pytest.fixture(scope="module")
def checker(cpu_judge):
    return lambda src, name="p", strict=False: check_problem(Problem.from_source(src, name=name), cpu_judge,
                                                             strict=strict)


@pytest.mark.parametrize("kind", sorted(WEAK))
def test_checker_refuses_weak_problem(checker, kind):
    src, rule = WEAK[kind]
    rep = checker(src, kind)
    assert not rep.ok
    failed = {c["name"] for c in rep.checks if c["ok"] is False}
    assert rule in failed, (rule, rep.reasons)
    assert any(r.startswith(rule) for r in rep.reasons)


def test_checker_accepts_a_good_problem_and_says_what_it_checked(checker):
    rep = checker(SCALE_ADD)
    assert rep.ok, rep.reasons
    names = {c["name"] for c in rep.checks if c["ok"]}
    assert {"finite", "not_near_zero", "not_constant", "input_sensitive", "uses_input", "deterministic",
            "tolerance_calibrated", "not_passthrough"} <= names
    assert rep.outputs[0]["shape"] == [13, 37]


def test_checker_strict_mode_wants_builtin_metadata(checker):
    rep = checker(SCALE_ADD, strict=True)
    assert not rep.ok
    assert any("missing metadata" in r for r in rep.reasons)
    assert any("FLOPS" in r for r in rep.reasons) and any("CPU_SIZES" in r for r in rep.reasons)


def test_routed_expert_weights_must_matter_together_not_alone(checker):
    """A mixture of experts names its expert weights in ROUTED_WEIGHTS: an expert no input chose
    (e1 here, weighted 0) may be skipped, but the experts together must matter."""
    experts = "self.e0 = nn.Linear(37, 37)\nself.e1 = nn.Linear(37, 37)"
    routed = 'ROUTED_WEIGHTS = r"^e[01]\\."\n'
    assert checker(problem_src("self.e0(x) + 0 * self.e1(x)", init=experts, extra=routed)).ok
    rep = checker(problem_src("self.e0(x) + 0 * self.e1(x)", init=experts))
    assert not rep.ok and any("weight e1.weight alone" in r for r in rep.reasons)
    rep = checker(problem_src("x * 2 + 0 * (self.e0(x) + self.e1(x))", init=experts, extra=routed))
    assert not rep.ok and any("routed expert weights (ROUTED_WEIGHTS) together" in r for r in rep.reasons)
    rep = checker(problem_src("self.e0(x) + self.e1(x)", init=experts, extra='ROUTED_WEIGHTS = "(("\n'))
    assert not rep.ok and any("is not a regular expression" in r for r in rep.reasons)


def test_checker_reports_broken_problems_and_survives(checker):
    rep = checker(problem_src("x * 2", inputs="[torch.randn(4), 'hello']", args="x, s"))
    assert not rep.ok and "get_inputs() must return a list of tensors" in rep.reasons[0]
    rep = checker(HEADER + "raise RuntimeError('boom at import')\nclass Model: pass\n"
                  "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    assert not rep.ok and "boom at import" in rep.reasons[0]
    # the reference worker is still fine afterwards
    assert checker(SCALE_ADD).ok


# ---------------------------------------------------------------------------------------------
# the built-in suite


def test_builtin_suite_has_five_levels_with_both_splits():
    suite = builtin_suite()
    assert not suite.errors, suite.errors
    assert len(suite) >= 50
    assert suite.levels() == [1, 2, 3, 4, 5]
    for lv in suite.levels():
        sub = suite.filter(level=lv)
        assert sub.filter(split="train").problems and sub.filter(split="heldout").problems, lv
    # the split of a built-in is written in its file, so it never moves
    assert all("SPLIT" in p.meta for p in suite)


def test_every_builtin_problem_passes_check_on_cpu(cpu_judge):
    """`mkgym problems check` on the whole built-in suite, at CPU sizes (the CI run)."""
    refused = [r.summary() for r in (check_problem(p, cpu_judge, strict=True) for p in builtin_suite())
               if not r.ok]
    assert not refused, "\n".join(refused)


# ---------------------------------------------------------------------------------------------
# loaders


@pytest.fixture
def kb_dir(tmp_path):
    """Our own files in KernelBench's layout, one of them broken."""
    (tmp_path / "level1").mkdir()
    (tmp_path / "level2").mkdir()
    (tmp_path / "level1" / "1_ScaleAdd.py").write_text(SCALE_ADD)
    (tmp_path / "level1" / "2_Tanh.py").write_text(problem_src("torch.tanh(x)"))
    (tmp_path / "level1" / "3_Broken.py").write_text("import torch\nclass Model(:\n")
    (tmp_path / "level2" / "1_TanhScale.py").write_text(problem_src("torch.tanh(x) * 3.0 - x"))
    (tmp_path / "notes.txt").write_text("not a problem")
    return tmp_path


def test_kernelbench_layout_loads_and_judges(kb_dir, cpu_judge):
    suite = load_kernelbench_dir(kb_dir)
    assert suite.names() == ["level1/1_ScaleAdd", "level1/2_Tanh", "level2/1_TanhScale"]
    assert [p.level for p in suite] == [1, 1, 2]
    assert len(suite.errors) == 1 and "3_Broken.py" in suite.errors[0].source
    assert "syntax error" in suite.errors[0].message
    assert load_suite(str(kb_dir)).names() == suite.names()
    res = cpu_judge.evaluate(suite.get("level1/1_ScaleAdd"), SCALE_ADD_TRITON)
    assert res.status == "correct", res.reason
    wrong = SCALE_ADD_TRITON.replace("x * 2.0 + 1.0", "x * 2.0")
    assert cpu_judge.evaluate(suite.get("level1/1_ScaleAdd"), wrong).status == "incorrect"


def test_the_kernelbench_suite_is_found_by_name_or_its_absence_says_how_to_point_at_it(kb_dir, monkeypatch, tmp_path):
    """load_suite("kernelbench") (`--suite kernelbench`): KernelBench's files where $MKGYM_KERNELBENCH
    points, else a clone in or beside the working directory, else shared/kernelbench beside the checkout;
    where none holds level1/, an error that says where it looked and what to set."""
    from megakernel_gym.curriculum import suite as suite_mod
    monkeypatch.setenv("MKGYM_KERNELBENCH", str(kb_dir))
    assert load_suite("kernelbench").names() == ["level1/1_ScaleAdd", "level1/2_Tanh", "level2/1_TanhScale"]
    monkeypatch.setenv("MKGYM_KERNELBENCH", str(tmp_path / "nowhere"))
    with pytest.raises(SuiteError, match="MKGYM_KERNELBENCH=.*nowhere.* holds no level1/"):
        load_suite("kernelbench")
    monkeypatch.delenv("MKGYM_KERNELBENCH")
    monkeypatch.setattr(suite_mod, "kernelbench_dirs", lambda: [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(SuiteError, match=r"not found \(looked in .*/a, .*/b\)\. Clone https://github.com/"
                                         r"ScalingIntelligence/KernelBench and set MKGYM_KERNELBENCH"):
        load_suite("kernelbench")
    with pytest.raises(SuiteError, match="pass 'builtin', 'kernelbench', a KernelBench-layout folder"):
        load_suite("kernelbnch")


def test_kernelbench_as_it_ships_loads_whole_by_name():
    """KernelBench's 250 problems (levels 1-3, unchanged, at their real sizes) as the `kernelbench` suite,
    every file loading, and `mkgym problems list --suite kernelbench` listing them by level."""
    import json
    import subprocess
    import sys
    from megakernel_gym.curriculum.suite import kernelbench_dir
    try:
        kernelbench_dir()
    except SuiteError as e:
        pytest.skip(f"no KernelBench checkout here: {e}")
    suite = load_suite("kernelbench")
    assert not suite.errors, suite.errors[:3]
    assert [sum(p.level == lv for p in suite) for lv in (1, 2, 3)] == [100, 100, 50]
    assert "level1/19_ReLU" in suite.names()
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "problems", "list", "--suite", "kernelbench",
                        "--level", "3", "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)
    assert len(rows) == 50 and all(row["name"].startswith("level3/") for row in rows)


def test_kernelbench_layout_errors(tmp_path):
    with pytest.raises(SuiteError, match="not a directory"):
        load_kernelbench_dir(tmp_path / "missing")
    with pytest.raises(SuiteError, match="no problem files"):
        load_kernelbench_dir(tmp_path)


def test_datasets_dataset_loads_and_judges(tmp_path, cpu_judge):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({
        "code": [SCALE_ADD, problem_src("torch.tanh(x)"), "not python ((", ""],
        "name": ["scale_add", "tanh", "broken", "empty"],
        "level": [1, 1, 2, 2]})
    suite = load_dataset_suite(ds)
    assert suite.names() == ["scale_add", "tanh"] and [p.level for p in suite] == [1, 1]
    assert len(suite.errors) == 2 and "row 2" in suite.errors[0].source
    ds.save_to_disk(str(tmp_path / "saved"))
    assert load_suite(str(tmp_path / "saved")).names() == ["scale_add", "tanh"]
    res = cpu_judge.evaluate(suite.get("scale_add"), SCALE_ADD_TRITON)
    assert res.status == "correct", res.reason
    # KernelBench's own dataset shape: a DatasetDict with one split per level
    dd = datasets.DatasetDict({"level_1": ds.select([0]), "level_2": ds.select([1]).remove_columns("level")})
    s2 = load_dataset_suite(dd)
    assert s2.names() == ["level_1/scale_add", "level_2/tanh"] and [p.level for p in s2] == [1, 2]


def test_dataset_without_code_column_names_the_columns():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"source": [SCALE_ADD], "name": ["x"]})
    with pytest.raises(SuiteError, match=r"no column 'code' \(columns: source, name\).*code_column="):
        load_dataset_suite(ds)
    assert load_dataset_suite(ds, code_column="source").names() == ["x"]


def test_user_problems_from_python_and_stable_splits(tmp_path):
    (tmp_path / "a.py").write_text(SCALE_ADD)
    (tmp_path / "b.py").write_text("def nothing(): pass\n")
    suite = Suite.from_files([tmp_path / "a.py", tmp_path / "b.py", tmp_path / "gone.py"], level=1)
    assert suite.names() == ["a"] and suite.get("a").level == 1
    assert len(suite.errors) == 2 and "must define Model" in suite.errors[0].message
    assert "does not exist" in suite.errors[1].message
    with pytest.raises(SuiteError, match="two problems are named"):
        Suite([suite.get("a"), suite.get("a")])
    # hash splits: stable, about the configured share, and explicit SPLIT wins
    names = [f"problem_{i}" for i in range(400)]
    splits = [split_of(Problem.from_source(SCALE_ADD, n)) for n in names]
    assert splits == [split_of(Problem.from_source(SCALE_ADD, n)) for n in names]
    assert 0.12 < splits.count("heldout") / 400 < 0.28
    forced = Problem.from_source(SCALE_ADD + "SPLIT = 'heldout'\n", "problem_0")
    assert split_of(forced) == "heldout"


# ---------------------------------------------------------------------------------------------
# the curriculum


def _scripted_run(cur: Curriculum, episodes: int, skill_start: float = 0.0, start_episode: int = 0):
    """A policy whose chance of solving a level-L problem rises with practice: p = sigmoid(skill - L).
    Its outcomes come from a separate seeded RNG, so a resumed run sees the same ones."""
    import math
    import random
    log = []
    for ep in range(start_episode, start_episode + episodes):
        rng = random.Random(ep)
        skill = skill_start + ep / 40.0
        draw = cur.sample()
        p = 1 / (1 + math.exp(-(skill - draw.level) * 3))
        ok = rng.random() < p
        cur.record(draw.problem, Outcome(ok, 1.5 if ok else None, ok, False))
        log.append((draw.problem, draw.level, ok))
        if ep % 10 == 9:
            for d in cur.heldout():
                ok = rng.random() < 1 / (1 + math.exp(-(skill - d.level) * 3))
                cur.record(d.problem, Outcome(ok, 1.5 if ok else None, ok, False), heldout=True)
    return log


def test_scripted_policy_promotes_through_the_levels_and_resumes(tmp_path):
    cur = Curriculum()
    assert cur.level == 1 and cur.turns() == 10
    _scripted_run(cur, 120)
    mid_level = cur.level
    assert 1 < mid_level < 5
    cur.save(tmp_path / "state.json")
    # the uninterrupted run and a run resumed from the file draw the same problems from here on
    resumed = Curriculum.load(tmp_path / "state.json")
    assert resumed.level == mid_level and resumed.episodes == 120
    a = _scripted_run(cur, 200, start_episode=120)
    b = _scripted_run(resumed, 200, start_episode=120)
    assert a == b
    episodes = 320
    while cur.level < 5 and episodes < 2000:
        _scripted_run(cur, 50, start_episode=episodes)
        episodes += 50
    assert cur.level == 5 and [p["to"] for p in cur.promotions] == [2, 3, 4, 5]
    assert cur.turns() == 20
    m = cur.metrics()
    assert m["curriculum/level"] == 5.0 and m["curriculum/promotions"] == 4.0
    assert 0 <= m["curriculum/L1/heldout_pass_rate"] <= 1 and "curriculum/L1/train_geomean_speedup" in m
    # review draws keep earlier levels in the mix
    assert any(d.review for d in (cur.sample() for _ in range(200)))
    assert json.loads(json.dumps(m)) == m


def test_sampling_favours_problems_solved_sometimes():
    cur = Curriculum()
    names = cur.pools[1]["train"]
    solved, never, sometimes = names[0], names[1], names[2]
    for i in range(40):
        cur.record(solved, True)
        cur.record(never, False)
        cur.record(sometimes, i % 2 == 0)
    assert cur.weight(sometimes) > 5 * cur.weight(solved) and cur.weight(sometimes) > 5 * cur.weight(never)
    counts = {n: 0 for n in names}
    for _ in range(2000):
        counts[cur.sample().problem] += 1
    assert counts[sometimes] > 3 * counts[solved]


def test_outcome_from_eval_results():
    assert Outcome.of({"status": "correct", "correct": True, "speedup": 1.3,
                       "speedups": {"eager": 2.0, "torch_compile": 0.9}}) == Outcome(True, 1.3, True, False)
    assert Outcome.of({"status": "rejected", "correct": False, "speedups": {"eager": 50.0}}) == Outcome(False)
    with pytest.raises(TypeError):
        Outcome.of(3.5)


def test_corrupt_state_and_bad_config_are_named(tmp_path):
    bad = tmp_path / "state.json"
    bad.write_text("{not json")
    with pytest.raises(CurriculumError, match=r"state.json: the curriculum state is not valid JSON.*delete it"):
        Curriculum.load(bad)
    bad.write_text(json.dumps({"format": "mkgym-curriculum", "version": 1, "level": 1}))
    with pytest.raises(CurriculumError, match="damaged curriculum state"):
        Curriculum.load(bad)
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(CurriculumError, match="not a megakernel-gym curriculum state"):
        Curriculum.load(bad)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[[levels]]\nlevel = 1\nturnz = 3\n")
    with pytest.raises(CurriculumError, match=r"c.toml: \[\[levels\]\] 1: unknown key\(s\) turnz"):
        CurriculumConfig.from_file(cfg)
    cfg.write_text("start_level = 9\n[[levels]]\nlevel = 1\n")
    with pytest.raises(CurriculumError, match="start_level 9"):
        CurriculumConfig.from_file(cfg)
    cfg.write_text("[[levels]]\nlevel = 1\npromote_pass_rate = 'high'\n")
    with pytest.raises(CurriculumError, match="promote_pass_rate must be float"):
        CurriculumConfig.from_file(cfg)
    cfg.write_text("levels = [\n")
    with pytest.raises(CurriculumError, match="not valid TOML"):
        CurriculumConfig.from_file(cfg)


def test_curriculum_over_a_user_suite_skips_missing_levels(kb_dir):
    cfg = CurriculumConfig.from_toml("suite = 'x'\n[[levels]]\nlevel = 1\nmin_heldout = 1\nwindow = 2\n"
                                     "[[levels]]\nlevel = 2\n[[levels]]\nlevel = 3\n")
    cur = Curriculum(cfg, suite=load_kernelbench_dir(kb_dir))
    assert cur.active == [1, 2]
    d = cur.heldout()[0]
    assert cur.record(d.problem, True, heldout=True) and cur.level == 2


# ---------------------------------------------------------------------------------------------
# the CLI


def mkgym(*args, **kw):
    return subprocess.run([sys.executable, "-m", "megakernel_gym.cli", *args], capture_output=True, text=True,
                          timeout=600, **kw)


def test_cli_check_refuses_with_reason_and_exit_code(tmp_path):
    (tmp_path / "weak.py").write_text(WEAK["near_zero"][0])
    (tmp_path / "good.py").write_text(SCALE_ADD)
    r = mkgym("problems", "check", str(tmp_path / "weak.py"), str(tmp_path / "good.py"), "--json",
              "--out", str(tmp_path / "report.json"))
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["refused"] == ["weak"] and out["passed"] == 1
    assert "an all-zero kernel is right on" in " ".join(out["reports"][0]["reasons"])
    assert json.loads((tmp_path / "report.json").read_text())["command"].startswith("mkgym problems check")
    r = mkgym("problems", "check", str(tmp_path / "good.py"))
    assert r.returncode == 0 and "1/1 passed" in r.stdout
    r = mkgym("problems", "check", "no_such_problem")
    assert r.returncode == 2 and "no built-in problem" in r.stderr


def test_cli_show_and_curriculum_show(tmp_path):
    r = mkgym("problems", "show", "softmax", "--json")
    info = json.loads(r.stdout)
    assert info["level"] == 1 and "class Model" in info["source"] and info["references"] == ["cuda", "triton"]
    cur = Curriculum()
    cur.record(cur.sample().problem, True)
    cur.save(tmp_path / "s.json")
    r = mkgym("curriculum", "show", str(tmp_path / "s.json"), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["level"] == 1 and info["episodes"] == 1 and len(info["levels"]) == 5
    (tmp_path / "bad.json").write_text("[]")
    r = mkgym("curriculum", "show", str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "bad.json: not a megakernel-gym curriculum state" in r.stderr
