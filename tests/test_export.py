"""policies/export.py and `mkgym export`: the best correct kernel per problem from the results store,
as files and a datasets dataset, loaded back as a drop-in module that matches the reference."""
import json
import os
import subprocess
import sys

import pytest

from megakernel_gym.curriculum import get_problem, reference_candidates
from megakernel_gym.policies.export import ExportError, export_kernels, load_kernel
from megakernel_gym.rewards import Judge, Problem, ResultsStore

WRONG = "\n".join([
    "import torch", "import triton", "import triton.language as tl", "", "",
    "@triton.jit", "def _zero(o, n, B: tl.constexpr):",
    "    i = tl.program_id(0) * B + tl.arange(0, B)", "    tl.store(o + i, tl.zeros([B], tl.float32), mask=i < n)",
    "", "", "class ModelNew(torch.nn.Module):", "    def __init__(self, *args):", "        super().__init__()", "",
    "    def forward(self, x):", "        o = torch.empty_like(x)", "        n = x.numel()",
    "        _zero[(triton.cdiv(n, 1024),)](o, n, B=1024)", "        return o", ""])


@pytest.fixture(scope="module")
def store_with_results(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "results.sqlite"
    store = ResultsStore(path)
    ref = reference_candidates("softmax")["triton"]
    with Judge("cpu", store=store) as j:
        good = j.evaluate(get_problem("softmax"), ref)
        bad = j.evaluate(get_problem("softmax"), WRONG)
    assert good.status == "correct" and bad.status == "incorrect", (good.reason, bad.reason)
    yield store, ref.source
    store.close()


def test_export_writes_the_best_correct_kernel_and_a_dataset(store_with_results, tmp_path):
    store, source = store_with_results
    index = export_kernels(tmp_path / "out", store=store)
    assert [k["problem"] for k in index["kernels"]] == ["softmax"]          # the wrong one is not shipped
    folder = tmp_path / "out" / "softmax"
    assert (folder / "kernel.py").read_text() == source
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["level"] == 1 and meta["backend"] == "cpu"
    assert json.loads((folder / "result.json").read_text())["status"] == "correct"
    import datasets
    ds = datasets.load_from_disk(index["dataset"])
    assert ds.num_rows == 1 and ds[0]["problem"] == "softmax" and ds[0]["source"] == source


def test_loaded_kernel_is_a_drop_in_module_for_the_reference(store_with_results, tmp_path):
    """ModelNew from the export, with Model's init inputs and state_dict, computes what Model
    computes; on a machine without a GPU load_kernel runs it in Triton's CPU interpreter by itself
    (a fresh process without TRITON_INTERPRET; the problem's rows cut to 16, the interpreter is slow)."""
    store, _ = store_with_results
    export_kernels(tmp_path / "out", store=store)
    code = f"""
import importlib.util, torch, megakernel_gym
from megakernel_gym.curriculum import get_problem
p = get_problem("softmax")
spec = importlib.util.spec_from_file_location("softmax_problem", p.path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ModelNew = megakernel_gym.load_kernel({str(tmp_path / "out" / "softmax")!r})
torch.manual_seed(0)
ref = mod.Model(*mod.get_init_inputs())
new = ModelNew(*mod.get_init_inputs())
new.load_state_dict(ref.state_dict())
x = [t[:16] for t in mod.get_inputs()]
torch.testing.assert_close(new(*x), ref(*x), atol=1e-5, rtol=1e-4)
print("MATCH")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "MATCH" in r.stdout, r.stderr[-3000:]


def test_empty_store_and_bad_paths_are_clear_errors(tmp_path):
    empty = ResultsStore(tmp_path / "empty.sqlite")
    with pytest.raises(ExportError, match="no correct kernel"):
        export_kernels(tmp_path / "out", store=empty)
    empty.close()
    with pytest.raises(ExportError, match="no kernel at"):
        load_kernel(tmp_path / "nowhere")
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "export", "--out", str(tmp_path / "o"),
                        "--store", str(tmp_path / "missing.sqlite")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_export_command(store_with_results, tmp_path):
    store, _ = store_with_results
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "export", "--out", str(tmp_path / "o"),
                        "--store", str(store.path), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [k["folder"] for k in json.loads(r.stdout)["kernels"]] == ["softmax"]


def test_export_ships_only_what_the_user_names(store_with_results, tmp_path):
    """Nothing named, nothing exported (not the machine-wide store); --run reads the run folder's own store."""
    store, _ = store_with_results
    cli = [sys.executable, "-m", "megakernel_gym.cli", "export", "--out", str(tmp_path / "o")]
    r = subprocess.run(cli + ["--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "name what to export: --run DIR" in json.loads(r.stdout)["error"]
    assert not (tmp_path / "o").exists()
    run = tmp_path / "run"
    r = subprocess.run(cli + ["--run", str(run)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "is not a folder" in r.stderr
    run.mkdir()
    # a run that judged nothing (the sim backend) says so, and names what to run instead
    r = subprocess.run(cli + ["--run", str(run), "--json"], capture_output=True, text=True, timeout=120)
    msg = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and "judged no kernels" in msg and "sim backend" in msg, msg
    assert "mkgym export --policy lm" in msg and "--store PATH" in msg
    import sqlite3
    with sqlite3.connect(store.path) as src, sqlite3.connect(run / "results.sqlite") as dst:
        src.backup(dst)                   # the store's rows, WAL and all
    r = subprocess.run(cli + ["--run", str(run), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [k["problem"] for k in json.loads(r.stdout)["kernels"]] == ["softmax"]


def test_export_run_of_a_quickstart_run_plays_its_trained_policy(tmp_path):
    """A quickstart run judged no kernels (the sim), but its folder holds the trained policy (policy/):
    `export --run` writes the schedules that policy plays, as `--policy lm` does for the shipped one;
    printed paths have no double slash where --out ends in one."""
    from megakernel_gym.env.megakernel import MegaKernelEnv
    from megakernel_gym.policies.lm import make_lm, prompt_of
    env = MegaKernelEnv(backend="sim", device="H100")
    obs, _ = env.reset(seed=0, options={"problem": "mk_mlp_block"})
    env.close()
    run = tmp_path / "run"
    make_lm(run / "policy", [prompt_of(obs["code"])[0]], n_layer=1, n_embd=16, n_head=2)   # untrained, as good
    (run / "curve.json").write_text(json.dumps({"config": {"problems": ["mk_mlp_block"], "device": "H100"}}))
    out = str(tmp_path / "mk") + "/"
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "export", "--run", str(run), "--out", out],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "judged no kernels" in r.stderr and "//" not in r.stdout, r.stdout
    meta = json.loads((tmp_path / "mk" / "mk_mlp_block" / "meta.json").read_text())
    assert meta["model"] == str(run / "policy") and meta["sim_device"] == "H100"
    assert "--run " + str(run) in (tmp_path / "mk" / "mk_mlp_block" / "kernel.py").read_text()
    assert "FutureWarning" not in r.stderr and "Loading weights" not in r.stderr


IDENTITY_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 2 * x


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''
COPY = WRONG.replace("_zero[(triton.cdiv(n, 1024),)](o, n, B=1024)", "_copy[(triton.cdiv(n, 1024),)](x, o, n, B=1024)") \
    .replace("@triton.jit\ndef _zero(o, n, B: tl.constexpr):\n    i = tl.program_id(0) * B + tl.arange(0, B)\n"
             "    tl.store(o + i, tl.zeros([B], tl.float32), mask=i < n)",
             "@triton.jit\ndef _copy(x, o, n, B: tl.constexpr):\n    i = tl.program_id(0) * B + tl.arange(0, B)\n"
             "    tl.store(o + i, 2 * tl.load(x + i, mask=i < n), mask=i < n)")


def test_export_keeps_problems_of_one_name_apart_and_ships_no_candidate_judged_wrong(tmp_path):
    """Red team 8: export grouped the store's rows by problem name, so a copy kernel judged incorrect on the
    built-in softmax and correct on a user's softmax.py (an identity; here 2x, since the judge no longer serves a
    problem a copy solves) shipped as 'softmax', with the built-in's
    level, in place of the correct reference. Problems are their file's hash; a candidate judged incorrect on a
    problem is not shipped for it, whatever else it scored there."""
    from megakernel_gym.rewards import Problem
    assert "_copy" in COPY and "_zero" not in COPY
    user_file = tmp_path / "softmax.py"
    user_file.write_text(IDENTITY_PROBLEM)
    user = Problem.from_file(user_file)
    assert user.name == "softmax" and user.sha256 != get_problem("softmax").sha256
    store = ResultsStore(tmp_path / "results.sqlite")
    ref = reference_candidates("softmax")["triton"]
    with Judge("cpu", store=store) as j:
        assert j.evaluate(get_problem("softmax"), ref).status == "correct"
        assert j.evaluate(get_problem("softmax"), COPY).status == "incorrect"
        copy_on_user = j.evaluate(user, COPY)
        assert copy_on_user.status == "correct", copy_on_user.reason
    index = export_kernels(tmp_path / "out", store=store)
    by_folder = {k["folder"]: k for k in index["kernels"]}
    assert sorted(by_folder) == sorted(["softmax-" + get_problem("softmax").sha256[:8], "softmax-" + user.sha256[:8]])
    builtin = by_folder["softmax-" + get_problem("softmax").sha256[:8]]
    assert builtin["level"] == 1 and (tmp_path / "out" / builtin["folder"] / "kernel.py").read_text() == ref.source
    mine = by_folder["softmax-" + user.sha256[:8]]
    assert mine["level"] is None and mine["candidate_sha256"] == copy_on_user.candidate_sha256
    # the same kernel judged incorrect once on the user's problem too (a flaky kernel): no longer shipped for it
    bad = copy_on_user.__class__.from_dict({**copy_on_user.to_dict(), "status": "incorrect", "correct": False})
    store.put(bad, "cpu:cpu")
    index = export_kernels(tmp_path / "out2", store=store)
    assert [k["problem_sha256"] for k in index["kernels"]] == [get_problem("softmax").sha256]
    store.close()


def test_an_exported_kernel_runs_under_the_judges_guard(tmp_path):
    """A kernel that can tell the judge's guard from a plain import (here by the repr of the guard's getattr, the
    module's name or the grad mode) computed softmax under the judge and zeros once exported (red team 8's hasattr(self, 'apply') is a refusal
    now; this is the class): load_kernel runs a judged candidate under the guard, as the judge ran it, so it
    computes what was scored. guarded=False (trusted code only) shows the difference."""
    src = reference_candidates("softmax")["triton"].source
    at = src.index("\n", src.index("    def forward(self")) + 1
    # three tells (red teams 8 and 12): the guard's getattr, the module's name (the judge's worker names it
    # mkgym_candidate_<hash>), the grad mode (the worker runs forward under no_grad)
    aware = src[:at] + ('        if "built-in" in repr(getattr) or not __name__.startswith("mkgym_candidate_") \\\n'
                        "                or torch.ones(1, requires_grad=True).clone().requires_grad:\n"
                        "            return torch.zeros_like(x)\n") + src[at:]
    err = _judged_then_loaded(tmp_path, aware)
    assert err["None"] < 1e-5 and err["False"] > 0.01, err


def test_an_exported_kernel_sees_fresh_memory_as_the_judge_showed_it(tmp_path):
    """Red team 14: the judge's checked calls fill every fresh allocation with NaN (so an unwritten output shows), and
    a kernel read a fresh torch.empty buffer and computed softmax only where every element was NaN: correct when
    judged, zeros once loaded. load_kernel runs a judged candidate's forward with its fresh allocations poisoned as
    the judge's were, so it computes what was scored; guarded=False (trusted code only) shows the difference."""
    src = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, p_ptr, n_cols, BLOCK: tl.constexpr, PB: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    p = tl.load(p_ptr + tl.arange(0, PB))
    judged = tl.sum((p != p).to(tl.int32), axis=0) == PB
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, tl.where(judged, e / tl.sum(e, axis=0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        probe = torch.empty(1024, device=x.device)
        _softmax[(x.shape[0],)](x, y, probe, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), PB=1024)
        return y
'''
    err = _judged_then_loaded(tmp_path, src)
    assert err["None"] < 1e-5 and err["False"] > 0.01, err


def test_export_folders_are_unique_whatever_the_problems_are_named(tmp_path):
    """Red team 17: two problems named softmax got folders softmax and softmax-<sha8>, but a third problem named
    softmax-<sha8> (a user's file) took that same folder, and its copy kernel overwrote the built-in softmax's.
    Folder names are made unique as a set before anything is written, and index.json sends each problem to its own."""
    builtin = get_problem("softmax")
    mine = Problem.from_source(builtin.source + "\n# my copy\n", "softmax")
    named = Problem.from_source(builtin.source + "\n# a third\n", f"softmax-{builtin.sha256[:8]}")
    honest = reference_candidates("softmax")["triton"]
    store = ResultsStore(tmp_path / "results.sqlite")
    with Judge("cpu", store=store) as j:
        for p in (builtin, mine, named):
            assert j.evaluate(p, honest).status == "correct"
    index = export_kernels(tmp_path / "out", store=store)
    store.close()
    folders = {k["problem_sha256"]: k["folder"] for k in index["kernels"]}
    assert len(folders) == 3 and len(set(folders.values())) == 3, folders
    for sha, folder in folders.items():
        assert json.loads((tmp_path / "out" / folder / "meta.json").read_text())["problem_sha256"] == sha


def _judged_then_loaded(tmp_path, source: str) -> dict:
    """`source` judged correct on the built-in softmax on the cpu backend, exported, then loaded with load_kernel
    in a fresh process, guarded (None: as exported) and not (False): each one's largest error against
    torch.softmax over three calls."""
    store = ResultsStore(tmp_path / "results.sqlite")
    with Judge("cpu", store=store) as j:
        res = j.evaluate(get_problem("softmax"), source)
    assert res.status == "correct", res.reason
    export_kernels(tmp_path / "out", store=store)
    store.close()
    code = f"""
import torch
from megakernel_gym import load_kernel
x = torch.randn(4, 300)
for guarded in (None, False):
    m = load_kernel({str(tmp_path / "out" / "softmax")!r}, guarded=guarded)()
    print(guarded, max(float((m(x) - torch.softmax(x, -1)).abs().max()) for _ in range(3)))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return {line.split()[0]: float(line.split()[1]) for line in r.stdout.strip().splitlines()}
