"""Only what pyproject.toml cannot say: ship megakernel_gym-gymnasium.pth into site-packages, in
regular and editable installs, so gymnasium.make("MegaKernel-v0") works with no other import
(see _megakernel_gym_gymnasium.py)."""
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "megakernel_gym-gymnasium.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


class EditableWheelWithPth(editable_wheel):
    """setuptools' editable wheel holds only its own .pth; add ours beside it."""

    def _select_strategy(self, *args, **kwargs):
        inner = super()._select_strategy(*args, **kwargs)
        content = Path(PTH).read_bytes()

        class WithPth:
            def __enter__(self):
                inner.__enter__()
                return self

            def __exit__(self, *exc):
                return inner.__exit__(*exc)

            def __call__(self, wheel, files, mapping):
                inner(wheel, files, mapping)
                wheel.writestr(PTH, content)
        return WithPth()


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
