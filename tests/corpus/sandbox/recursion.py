# expect: runtime_error exception
# unbounded recursion
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return self.forward(x)
