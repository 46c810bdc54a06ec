"""`mkgym judge` and `mkgym problems list`: one JSON value on stdout with --json, and exit codes
that are non-zero only when the command itself could not run."""
import json
import subprocess
import sys

import pytest

from conftest import CORPUS


def mkgym(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "megakernel_gym.cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=600)


@pytest.fixture
def store_args(tmp_path):
    return ["--store", str(tmp_path / "r.sqlite")]


def test_judge_reference_json(store_args):
    r = mkgym("judge", "layernorm", "reference", "--backend", "cpu", "--json", *store_args)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)  # exactly one JSON value: json.loads fails on anything extra
    assert d["status"] == "correct" and d["correct"] is True and d["backend"] == "cpu"
    assert d["problem"] == "layernorm" and len(d["candidate_sha256"]) == 64
    assert len(d["seeds"]) == 6 and d["speedup"] is None and "reward" in d


def test_failed_candidate_is_a_result_not_an_error(store_args):
    bad = CORPUS / "adversarial" / "torch_softmax.py"
    r = mkgym("judge", "softmax", str(bad), "--backend", "cpu", "--json", *store_args)
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert d["status"] == "rejected" and d["flags"][0]["rule"] == "torch_compute"


def test_candidate_from_stdin_and_human_output(store_args):
    src = (CORPUS / "adversarial" / "syntax_error.py").read_text()
    r = mkgym("judge", "softmax", "-", "--backend", "cpu", *store_args, stdin=src)
    assert r.returncode == 0
    assert "compile_error" in r.stdout and "syntax" in r.stdout


def test_kernelbench_file_as_problem(store_args, tmp_path):
    prob = CORPUS.parent / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py"
    r = mkgym("judge", str(prob), str(CORPUS / "legit" / "relu_kernelbench.py"), "--backend", "cpu", "--json",
              *store_args)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "correct"


@pytest.mark.parametrize("args,needle", [
    (["judge", "no_such_problem", "reference", "--backend", "cpu"], "no built-in problem"),
    (["judge", "softmax", "/nonexistent/cand.py", "--backend", "cpu"], "does not exist"),
    (["judge", "/nonexistent/prob.py", "reference", "--backend", "cpu"], "does not exist"),
    (["judge", "softmax", "reference", "--backend", "tpu"], "unknown backend"),
])
def test_bad_input_exits_nonzero_with_a_clear_message(args, needle):
    r = mkgym(*args, "--no-store")
    assert r.returncode == 2
    assert needle in r.stderr and r.stdout == ""


def test_gpu_requested_without_gpu():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = mkgym("judge", "softmax", "reference", "--backend", "gpu", "--no-store")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr and "--backend cpu" in r.stderr


def test_problem_file_that_raises(tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 "        return x\ndef get_inputs():\n    raise ValueError('bad sizes')\n"
                 "def get_init_inputs():\n    return []\n")
    r = mkgym("judge", str(p), str(CORPUS / "legit" / "relu_kernelbench.py"), "--backend", "cpu", "--no-store")
    assert r.returncode == 2 and "broken" in r.stderr and "bad sizes" in r.stderr


def test_problem_file_missing_interface(tmp_path):
    p = tmp_path / "half.py"
    p.write_text("import torch\nclass Model: pass\n")
    r = mkgym("judge", str(p), "reference", "--backend", "cpu", "--no-store")
    assert r.returncode == 2 and "get_inputs" in r.stderr


def test_problems_list_json():
    r = mkgym("problems", "list", "--json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    names = {row["name"] for row in rows}
    originals = {"softmax", "layernorm", "matmul_bias_relu", "rmsnorm", "gqa_decode"}
    assert originals <= names
    assert all("triton" in row["references"] for row in rows if row["name"] in originals)
    assert len(rows) >= 50 and {row["level"] for row in rows} == {1, 2, 3, 4, 5}
    assert all(row["split"] in ("train", "heldout") and row["tags"] for row in rows)


def test_compile_emit_ir_and_cpu_vm():
    r = mkgym("compile", "llama-tiny", "--emit", "ir", "--backend", "cpu", "--sms", "8", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ir"].startswith("mkir v1 model=llama-tiny sms=8")
    assert d["tasks"] > 37 and d["max_abs_err_vs_eager"] < 1e-5 and d["max_abs_err_vs_graph"] < 1e-5


def test_compile_takes_transformers_families():
    """The zoo's `<family>-tiny` entries are transformers' own models through compiler.families."""
    from megakernel_gym.compiler import ZOO
    from megakernel_gym.compiler.families import FAMILIES
    assert {f"{fam}-tiny" for fam in FAMILIES} <= set(ZOO)
    out = json.loads(mkgym("compile", "gpt2-tiny", "--backend", "cpu", "--sms", "8", "--json").stdout)
    assert out["ops"] > 30 and out["max_abs_err_vs_eager"] < 1e-5 and out["max_abs_err_vs_graph"] < 1e-5, out
    r = mkgym("compile", "mixtral-tiny", "--backend", "sim", "--expert", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["predicted_us"] > 0, r.stderr[-800:]


def test_compile_sim_prediction_changes_with_an_edit():
    base = json.loads(mkgym("compile", "llama-tiny", "--backend", "sim", "--json").stdout)
    one_sm = json.loads(mkgym("compile", "llama-tiny", "--backend", "sim", "--json", "--edit",
                              "assign * sms=0").stdout)
    assert 0 < base["predicted_us"] < one_sm["predicted_us"]


@pytest.mark.parametrize("args,needle", [
    (["compile", "gpt-17"], "unknown model"),
    (["compile", "llama-tiny", "--edit", "tile lm_head n=7"], "allowed sizes: 1, 2, 4, 8"),
    (["compile", "llama-tiny", "--edit", "order lm_head before embed"], "unchanged"),
    (["compile", "llama-1b", "--backend", "cpu"], "too large"),
    (["compile", "llama-tiny", "--emit", "tasks", "--op", "nope"], "no op 'nope'"),
])
def test_compile_bad_input(args, needle):
    r = mkgym(*args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_every_json_failure_is_one_json_object_on_stdout():
    """Under --json a command that cannot run prints one JSON object on stdout (and its message on stderr):
    argparse's usage errors and the commands' own."""
    for args in (("judge", "--json"), ("judge", "nope_problem", "reference", "--json", "--no-store"),
                 ("problems", "show", "nope_problem", "--json")):
        r = mkgym(*args)
        assert r.returncode == 2, (args, r.stderr[-500:])
        err = json.loads(r.stdout)
        assert err["exit_code"] == 2 and err["error"], args


def test_small_things_a_newcomer_meets():
    """compile --help names every zoo model; a mistyped name gets a did-you-mean; an edited schedule is
    shown against the default; the README's count of built-in problems is the code's."""
    import re
    from pathlib import Path

    from megakernel_gym.cli import build_parser
    from megakernel_gym.compiler import ZOO
    from megakernel_gym.curriculum import builtin_names
    sub = next(a for a in build_parser()._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    helptext = sub.choices["compile"].format_help()
    assert all(name in helptext for name in ZOO), [n for n in ZOO if n not in helptext]
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert int(re.search(r"(\d+) built-in problems", readme).group(1)) == len(builtin_names())
    r = mkgym("judge", "sofmax", "reference", "--backend", "cpu", "--no-store")
    assert r.returncode == 2 and "did you mean softmax" in r.stderr
    r = mkgym("compile", "llama-tiyn")
    assert r.returncode == 2 and "did you mean llama-tiny" in r.stderr
    r = mkgym("compile", "mlp-tiny", "--backend", "sim", "--tuned", "--json")
    d = json.loads(r.stdout)
    assert d["speedup_over_default"] == pytest.approx(d["default_predicted_us"] / d["predicted_us"], rel=1e-3)


def test_a_store_that_is_not_a_database_and_a_bad_problem_file_are_json_errors(tmp_path):
    """Red team 17: --store naming a file that is not SQLite printed a traceback (nothing on stdout, exit 1), a
    problem file with DTYPES = {"float32"} crashed `problems list --suite --json`, and a 200,000-term expression in
    one raised RecursionError out of the parser. Each is one JSON error (or a skipped file) now."""
    bad = tmp_path / "notadb.sqlite"
    bad.write_text("not a database")
    for args in (["judge", "softmax", "reference", "--backend", "cpu", "--no-server", "--store", str(bad), "--json"],
                 ["export", "--store", str(bad), "--out", str(tmp_path / "out"), "--json"]):
        r = mkgym(*args)
        assert r.returncode == 2 and "not a results database" in json.loads(r.stdout)["error"], (args, r.stdout, r.stderr[-500:])
    suite = tmp_path / "suite" / "level1"
    suite.mkdir(parents=True)
    body = ("import torch\nimport torch.nn as nn\n{line}\nclass Model(nn.Module):\n    def forward(self, x):\n"
            "        return torch.relu(x)\ndef get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n")
    (suite / "1_sets.py").write_text(body.format(line='DTYPES = {"float32"}'))
    (suite / "2_deep.py").write_text(body.format(line="X = " + "1+" * 200_000 + "1"))
    (suite / "3_fine.py").write_text(body.format(line='DTYPES = ["float32"]'))
    r = mkgym("problems", "list", "--suite", str(tmp_path / "suite"), "--json")
    assert r.returncode == 0, r.stderr[-800:]
    assert [row["name"] for row in json.loads(r.stdout)] == ["level1/3_fine"]
    assert "must be a list of strings" in r.stderr and "nested too deep" in r.stderr
