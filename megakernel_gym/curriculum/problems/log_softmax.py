"""Log-softmax over a 128k vocabulary: turning decode logits into the log-probabilities samplers and scorers use."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "log_softmax"
DTYPES = ["float32"]
TAGS = ["reduction", "memory-bound", "fp32"]
SPLIT = "train"
DESCRIPTION = ("out = x - logsumexp(x) along the last dim of fp32 logits [batch_size, vocab] = [64, 128256] "
               "(Llama-3 vocabulary); few rows, so each row needs many threads, and the result must stay "
               "accurate for very negative entries.")

batch_size = 64   # sequences sampled in one decode step
vocab = 128256    # Llama-3 vocabulary; not a power of two
dtype = torch.float32

CPU_SIZES = {"batch_size": 7, "vocab": 501}


class Model(nn.Module):
    """torch.log_softmax(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, vocab, dtype=dtype)]


def get_init_inputs():
    return []


def FLOPS():
    # per element: max comparison, subtract the max, exp, add into the sum, subtract the log-sum
    return 5 * batch_size * vocab


def BYTES():
    return 2 * batch_size * vocab * dtype.itemsize
