"""policies/: the baselines' one interface, their episodes on sim, and `mkgym eval`'s leaderboard."""
import json
import math
import subprocess
import sys

import pytest

from megakernel_gym.compiler import ZOO, capture
from megakernel_gym.ir_exposure import make_ir
from megakernel_gym.policies import POLICIES, edit_menu, evaluate_policy, format_board, make_policy
from megakernel_gym.policies.baselines import try_edit


@pytest.fixture(scope="module")
def mlp_board():
    return {name: evaluate_policy(name, backend="sim", problems=["mk_mlp_block"]) for name in
            ("default", "random", "heuristic", "search", "expert")}


def test_baselines_rank_as_they_should_on_sim(mlp_board):
    level = {name: row["levels"][5] for name, row in mlp_board.items()}
    assert all(s["episodes"] == 1 and s["pass_rate"] == 1.0 for s in level.values())
    assert level["default"]["geomean_speedup"] == 1.0 and level["default"]["fast_1"] == 0.0
    assert level["heuristic"]["geomean_speedup"] > 1.05 and level["heuristic"]["fast_1"] == 1.0
    assert level["search"]["geomean_speedup"] >= level["heuristic"]["geomean_speedup"] - 1e-9
    # on the MLP block the expert's one lever past the heuristic is the inlined norm: measured within
    # 1% on an H100 (the decode table's MLP column, 59.2 vs 58.8 us); the sim puts it 2.3% behind (1.071
    # against 1.096 over the default) since a task's first memory latency overlaps its wait
    # (costmodel.polled_latency), which the norm's own task gets and the inlined norm saves no more;
    # 3.0% behind (1.061 against 1.095) with the H200's wait groups' tails since session 53
    assert level["expert"]["geomean_speedup"] >= 0.965 * level["heuristic"]["geomean_speedup"]
    ep = mlp_board["random"]["episodes"][0]
    # three random edits, then submit; none beat the default on the MLP block, so it stands (speedup 1, return 0)
    assert ep["turns"] == 4 and ep["status"] in ("correct", "default_schedule")
    assert ep["return"] == pytest.approx(max(0.0, math.log(ep["speedup"])))
    text = format_board(list(mlp_board.values()))
    assert text.splitlines()[0].split()[:3] == ["policy", "level", "episodes"] and "heuristic" in text


def test_edit_menu_is_mostly_valid_and_the_invalid_are_refused(graphs):
    ir = make_ir(graphs["llama-tiny"], num_sms=8)
    menu = edit_menu(ir)
    verbs = {m.split()[0] for m in menu}
    assert {"tile", "counter", "prefetch", "fuse"} <= verbs
    assert any(m.startswith("tile layers.*.") for m in menu)          # one edit for every layer alike
    valid = [m for m in menu if try_edit(ir, m) is not None]
    assert len(valid) >= len(menu) // 2
    # a fusion for every layer alike is one valid edit (the edit language pairs each layer's ops)
    assert all(try_edit(ir, m) is not None for m in menu if m.startswith("fuse layers.*."))


def test_search_improves_the_prediction_and_keeps_a_trace():
    g = capture(*ZOO["llama-tiny"](), "llama-tiny")
    pol = make_policy("search", seed=0, rounds=2, device="H100")
    batch, before, after = pol.search(make_ir(g, num_sms=8))
    assert after < before and batch
    assert [t["round"] for t in pol.trace] == list(range(len(pol.trace)))
    assert all(b["predicted_us"] <= a["predicted_us"] for a, b in zip(pol.trace, pol.trace[1:]))


def test_reference_policy_on_an_op_level_problem():
    row = evaluate_policy("reference", backend="cpu", problems=["softmax"])
    assert row["levels"][1]["pass_rate"] == 1.0
    row = evaluate_policy("default", backend="cpu", problems=["softmax"])
    assert row["levels"][1]["pass_rate"] == 0.0 and row["episodes"][0]["status"] == "no_result"


def test_unknown_policy_and_empty_selection_are_clear_errors():
    with pytest.raises(ValueError, match="unknown policy 'greedy'"):
        make_policy("greedy")
    with pytest.raises(ValueError, match="no problems match"):
        evaluate_policy("default", backend="sim", levels=[2])
    assert set(POLICIES) == {"default", "random", "heuristic", "expert", "search", "learned", "lm", "reference"}
    with pytest.raises(FileNotFoundError, match="bench/learning_sim.py --save"):
        make_policy("learned", weights="/nonexistent/w.json")
    from megakernel_gym.policies.lm import PolicyTextError
    with pytest.raises(PolicyTextError, match="bench/learning_lm.py"):
        make_policy("lm", model="/nonexistent/lm")


def test_learned_policy_plays_the_shipped_weights_and_beats_the_default(tmp_path):
    """`mkgym eval --policy learned` plays the weights bench/learning_sim.py ships, greedily, as one
    edit batch; on the held-out long-context model it is ahead of the default schedule (sim). On the
    single attention block its light-op fusions read no gain since the sim prices those ops' own time
    (they ran 3-7% slower than the default on an H200, sim_bisect.json run 8), and the episode keeps
    the default schedule. Weights for another feature layout are refused with the command that makes
    new ones."""
    row = evaluate_policy("learned", backend="sim", problems=["mk_llama_long_context"])
    assert row["episodes"][0]["status"] == "correct" and row["levels"][5]["geomean_speedup"] > 1.0
    block = evaluate_policy("learned", backend="sim", problems=["mk_attention_block"])
    assert block["episodes"][0]["correct"] and block["levels"][5]["geomean_speedup"] <= 1.0 + 1e-9
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"features": {"verbs": ["tile"]}, "theta": [0.0]}))
    with pytest.raises(ValueError, match="another feature layout"):
        make_policy("learned", weights=str(bad))


def test_eval_command_prints_and_writes_the_leaderboard(tmp_path):
    out = tmp_path / "board.json"
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "eval", "--policy", "default,heuristic",
                        "--problem", "mk_mlp_block", "--json", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert [row["policy"] for row in doc["board"]] == ["default", "heuristic"] and doc["backend"] == "sim"
    assert json.loads(out.read_text()) == doc
    r = subprocess.run([sys.executable, "-m", "megakernel_gym.cli", "eval", "--policy", "nope"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown policy 'nope'" in r.stderr
