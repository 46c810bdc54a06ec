"""Token embedding lookup: the first op of every LLM, copying one table row per token id."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "embedding_gather"
DTYPES = ["bfloat16"]
TAGS = ["gather", "memory-bound", "bf16"]
SPLIT = "train"
DESCRIPTION = ("out[b, s, :] = table[ids[b, s], :] for int64 ids [batch_size, seq_len] = [2, 2048] and a bf16 table "
               "[vocab, dim] = [32000, 4096] held by the model (nn.Embedding); out is [2, 2048, 4096] bf16.")

batch_size = 2
seq_len = 2048   # 4096 tokens in all; the output is 32 MiB
vocab = 32000    # Llama-2 vocabulary: the table is 250 MiB, most of it never touched
dim = 4096
dtype = torch.bfloat16

CPU_SIZES = {"batch_size": 2, "seq_len": 29, "vocab": 53, "dim": 37, "dtype": torch.float32}


class Model(nn.Module):
    """nn.Embedding(vocab, dim)(ids)."""

    def __init__(self, vocab: int, dim: int, dtype: torch.dtype):
        super().__init__()
        # nn.Embedding draws N(0, 1) rows, so every row is distinct and matters
        self.table = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len), dtype=torch.int64)]


def get_init_inputs():
    return [vocab, dim, dtype]


def FLOPS():
    # a gather does no arithmetic; one per element copied keeps the roofline's compute term nonzero
    return batch_size * seq_len * dim


def BYTES():
    # ids read, output written, and each distinct row read once: n uniform draws from vocab hit
    # vocab * (1 - (1 - 1/vocab)^n) distinct rows on average (about 6% fewer than n here)
    n = batch_size * seq_len
    rows = int(vocab * (1.0 - (1.0 - 1.0 / vocab) ** n))
    return n * 8 + (rows + n) * dim * dtype.itemsize
