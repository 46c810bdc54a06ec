"""Every ```python block of the README runs as a plain script on a fresh clone (issue 40): saved as a
file with no `if __name__ == "__main__":` guard and run from an empty folder in a process of its own,
as a researcher pastes it. The judge's workers are spawned processes, and spawn re-runs the parent's
main script in each child unless told not to (rewards/workers.start_process): a block that starts the
env at its top level would start it again in every worker."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)

# what each block must print (in order of the README), so a block that runs but does nothing fails
EXPECT = [r"## Feedback", r"^correct correct on \d+ seeds", r"^correct .*\n.*no CUDA GPU here", r"curriculum/L1/heldout_pass_rate",
          r"^correct$", r"^(torch.Size\(\[1, 151936\]\)|ModelNew\(\*get_init_inputs\(\)\) builds qwen3's megakernel)"]


def test_every_python_block_of_the_readme_runs_as_a_plain_script(tmp_path):
    assert len(BLOCKS) == len(EXPECT), f"the README has {len(BLOCKS)} python blocks; EXPECT names {len(EXPECT)}"
    env = dict(os.environ, MKGYM_STORE=str(tmp_path / "results.sqlite"), PYTHONWARNINGS="ignore")
    procs = []
    for i, block in enumerate(BLOCKS):     # all at once: each waits on its workers' start for most of its time
        folder = tmp_path / f"block{i}"
        folder.mkdir()
        (folder / "snippet.py").write_text(block)
        procs.append(subprocess.Popen([sys.executable, "snippet.py"], cwd=folder, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    failures = []
    for i, (p, want) in enumerate(zip(procs, EXPECT)):
        out, err = p.communicate(timeout=600)
        if p.returncode != 0 or not re.search(want, out, re.M):
            failures.append(f"block {i + 1} (exit {p.returncode}), wanted /{want}/ in its output:\n{out[-800:]}\n"
                            f"{err[-2500:]}")
    assert not failures, "\n\n".join(failures)
