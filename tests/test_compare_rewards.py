"""Output comparison (tolerances, NaN, shape, dtype) and the reward functions."""
import math

import pytest
import torch

from megakernel_gym.rewards import EvalResult, fast_p, gated_log_speedup, kevin_reward, milestone_reward
from megakernel_gym.rewards.judge import compare


def test_exact_and_within_tolerance():
    r = torch.randn(64, 64)
    assert compare([r.clone()], [r], None, None)["ok"]
    assert compare([r + 5e-5], [r], None, None)["ok"]           # fp32 default atol 1e-4
    assert not compare([r + 5e-3], [r], None, None)["ok"]
    assert compare([r + 5e-3], [r], 1e-2, 1e-2)["ok"]            # problem's own tolerance


def test_bf16_default_tolerance():
    r = torch.randn(128).bfloat16()
    assert compare([(r.float() * 1.004).bfloat16()], [r], None, None)["ok"]
    assert not compare([(r.float() * 1.05 + 0.05).bfloat16()], [r], None, None)["ok"]


def test_nan_poison_fails_and_names_the_index():
    r = torch.randn(4, 8)
    o = r.clone()
    o[2, 5] = float("nan")
    res = compare([o], [r], None, None)
    assert not res["ok"] and "(2, 5)" in res["why"] and "NaN" in res["why"]


def test_inf_fails():
    r = torch.randn(10)
    o = r.clone()
    o[0] = float("inf")
    assert not compare([o], [r], None, None)["ok"]


def test_shape_dtype_count():
    r = torch.randn(3, 4)
    assert "shape" in compare([r.reshape(4, 3)], [r], None, None)["why"]
    assert "dtype" in compare([r.double()], [r], None, None)["why"]
    assert "output(s)" in compare([r, r], [r], None, None)["why"]


def test_integer_outputs_exact():
    r = torch.arange(10)
    assert compare([r.clone()], [r], None, None)["ok"]
    assert not compare([r + 1], [r], None, None)["ok"]


def _res(status, speedup=None, speedups=None):
    return EvalResult(status=status, reason="", problem="p", backend="gpu", candidate_sha256="x",
                      speedup=speedup, speedups=speedups or {})


def test_gated_reward_orders_failures_then_correct():
    tiers = [gated_log_speedup(_res(s)) for s in ("rejected", "compile_error", "runtime_error", "incorrect")]
    assert tiers == sorted(tiers)
    assert gated_log_speedup(_res("rejected")) == -1.0
    slow = gated_log_speedup(_res("correct", 0.01))
    assert slow > gated_log_speedup(_res("incorrect"))
    assert gated_log_speedup(_res("correct", 2.0)) == pytest.approx(math.log(2.0))
    assert gated_log_speedup(_res("correct", 1e9)) == 3.0            # clipped
    assert gated_log_speedup(_res("rejected", 50.0)) == -1.0         # never positive when rejected


def test_kevin_and_milestone_and_fast_p():
    assert kevin_reward(_res("correct", 1.5)) == pytest.approx(1.8)
    assert kevin_reward(_res("rejected", 100.0)) == 0.0
    assert milestone_reward(_res("correct", 1.2, {"eager": 1.5, "torch_compile": 0.9})) == 2.0
    assert milestone_reward(_res("correct", 1.2, {"eager": 1.5, "torch_compile": 1.1})) == 3.0
    rs = [_res("correct", 1.5), _res("correct", 0.8), _res("incorrect"), _res("rejected", 9.0)]
    assert fast_p(rs, 1.0) == 0.25
    assert fast_p(rs, 0.0) == 0.5


def test_evalresult_json_roundtrip():
    r = _res("correct", 1.5)
    d = r.to_dict()
    assert d["correct"] is True and set(d) >= {"status", "correct", "reason", "speedup", "baselines", "timing",
                                              "seeds", "flags", "backend", "problem", "candidate_sha256"}
    assert EvalResult.from_dict(d) == r
    with pytest.raises(ValueError):
        _res("great")
