"""Policies: baselines with one interface (baselines.py) and their leaderboard (evaluate.py, `mkgym eval`)."""
from megakernel_gym.policies.baselines import POLICIES, Policy, edit_menu, make_policy
from megakernel_gym.policies.evaluate import evaluate_policy, format_board

__all__ = ["POLICIES", "Policy", "make_policy", "edit_menu", "evaluate_policy", "format_board"]
