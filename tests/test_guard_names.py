"""The guard names some of the judge's own types by string, so that it imports none of them: every such
name must be a real class or module, or the guard would quietly stop recognizing what a candidate's
load_inline or load_cuda gave it (an honest candidate refused), as a module's move would do (issue 42)."""
from __future__ import annotations

import importlib
import pkgutil

from megakernel_gym.rewards import guard


def test_every_type_the_guard_trusts_by_name_is_a_real_class():
    for kind in (guard.CUDA_MODULE_TYPE, *guard.KERNEL_MODULE_TYPES):
        mod, _, cls = kind.rpartition(".")
        assert isinstance(getattr(importlib.import_module(mod), cls), type), kind


def test_every_module_the_guard_trusts_by_name_exists_and_the_inline_package_is_all_of_them():
    for name in guard.KERNEL_LIKE_MODULES:
        importlib.import_module(name)
    inline = importlib.import_module("megakernel_gym.rewards.inline")
    found = {f"megakernel_gym.rewards.inline.{m.name}" for m in pkgutil.iter_modules(inline.__path__)}
    assert found == set(guard.INLINE_MODULES)
