# expect: runtime_error crash
# tries to SIGKILL its parent (the judge), its process group and everything it can see, then exits
import torch
import torch.nn as nn
import os
import signal


class ModelNew(nn.Module):
    def forward(self, x):
        for attempt in (lambda: os.kill(os.getppid() or 1, signal.SIGKILL),
                        lambda: os.killpg(os.getpgid(0), signal.SIGKILL),
                        lambda: os.kill(-1, signal.SIGKILL)):
            try:
                attempt()
            except OSError:
                pass
        os._exit(1)
