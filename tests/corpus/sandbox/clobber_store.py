# expect: runtime_error crash
# overwrites the judge's results database with garbage, then exits
import torch
import torch.nn as nn
import os


class ModelNew(nn.Module):
    def forward(self, x):
        path = os.environ.get("MKGYM_STORE", "")
        if path and os.path.exists(path):
            open(path, "wb").write(b"garbage")
        os._exit(9)
