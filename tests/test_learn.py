"""policies/learn.py: the menu policy's features, its policy-gradient step, and a short training run
with its curve (bench/learning_sim.py)."""
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megakernel_gym.ir_exposure import make_ir
from megakernel_gym.policies.learn import N_FEATURES, MenuPolicy, features, rollout, train_menu_policy

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_ir(graphs):
    return make_ir(graphs["llama-tiny"], num_sms=8)


def test_features_tell_edits_apart(tiny_ir):
    from megakernel_gym.policies import edit_menu
    menu = edit_menu(tiny_ir)
    idx = [features(tiny_ir, e) for e in menu]
    assert all(0 <= i < N_FEATURES for i in idx)
    fuse = next(e for e in menu if e.startswith("fuse") and e.endswith("mlp.silu_mul"))
    up = next(e for e in menu if e.startswith("tile layers.*.mlp.gate_proj"))
    assert features(tiny_ir, fuse) != features(tiny_ir, up)
    assert len(set(idx)) > 8


def test_policy_gradient_moves_probability_toward_a_rewarded_edit(tiny_ir):
    pol = MenuPolicy()
    menu, _, p0 = pol.distribution(tiny_ir)
    edit, grad = pol.choose(tiny_ir, random.Random(1))
    assert grad.sum() == pytest.approx(0.0)                      # d log softmax: one-hot minus expectation
    pol.theta += 1.0 * grad                                        # a positive advantage
    _, _, p1 = pol.distribution(tiny_ir)
    k = menu.index(edit)
    assert p1[k] > p0[k]


def test_training_runs_and_records_a_curve(graphs):
    pol, curve = train_menu_policy(["mlp-tiny"], ["attention-tiny"], episodes=20, eval_every=10, seed=0)
    assert [p["episode"] for p in curve] == [0, 10, 20]
    assert curve[0]["train_return_mean"] is None and curve[-1]["train_return_mean"] is not None
    assert all(p["heldout_geomean_speedup"] > 0 for p in curve) and np.abs(pol.theta).sum() > 0
    r, grad, applied = rollout(pol, make_ir(graphs["mlp-tiny"], num_sms=132), 3, random.Random(0), True, "H100")
    assert np.isfinite(r) and len(applied) <= 3


def test_bench_writes_the_curve(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_sim.py"), "--episodes", "20", "--eval-every",
                        "10", "--out", str(tmp_path), "--save", str(tmp_path / "w.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "learning_sim.json").read_text())
    assert len(doc["rows"]) == 3 and doc["targets"] and "heuristic" in doc["notes"]
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    # the saved weights load back into the policy that `mkgym eval --policy learned` plays
    assert MenuPolicy.load(tmp_path / "w.json").theta.shape == (N_FEATURES,)
