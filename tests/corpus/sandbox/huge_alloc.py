# expect: runtime_error oom
# asks for 16 TiB
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty(1 << 44, dtype=torch.uint8, device=x.device)
