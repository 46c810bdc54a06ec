# expect: runtime_error crash
# the process exits under the judge
import torch
import torch.nn as nn
import os


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(3)
