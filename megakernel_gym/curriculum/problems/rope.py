"""Rotary position embedding (RoPE) applied to the queries of a prefill, Llama/NeoX half-split layout."""
import torch
import torch.nn as nn

LEVEL = 1
OP_TYPE = "rope"
DTYPES = ["bfloat16"]
TAGS = ["elementwise", "attention", "memory-bound", "bf16"]
SPLIT = "heldout"
DESCRIPTION = ("RoPE on bf16 q [batch_size, num_heads, seq_len, head_dim] = [2, 32, 2048, 128]: with h = head_dim/2, "
               "out[..., :h] = q1*cos - q2*sin and out[..., h:] = q2*cos + q1*sin (q1, q2 the two halves), where "
               "the model holds fp32 cos/sin tables [seq_len, h] for positions 0..seq_len-1; math in fp32.")

batch_size = 2
num_heads = 32     # Llama-3 8B query heads
seq_len = 2048     # prefill positions; q is 32 MiB
head_dim = 128
rope_base = 500000.0  # Llama-3's theta
dtype = torch.bfloat16

# head_dim 26: each half is 13 wide, so neither half fills a power-of-two block.
CPU_SIZES = {"batch_size": 2, "num_heads": 3, "seq_len": 11, "head_dim": 26, "dtype": torch.float32}


class Model(nn.Module):
    """q * cos + rotate_half(q) * sin, with the angle tables built once at init."""

    def __init__(self, seq_len: int, head_dim: int, rope_base: float):
        super().__init__()
        # angles in float64 so the fp32 tables are correctly rounded even at large positions
        inv_freq = rope_base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", angles.cos().float())
        self.register_buffer("sin", angles.sin().float())

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        # fp32 for bf16 inputs; float64 stays float64 so the calibration run is a real one
        qf = q.to(torch.promote_types(q.dtype, torch.float32))
        h = q.shape[-1] // 2
        q1, q2 = qf[..., :h], qf[..., h:]
        out = torch.cat([q1 * self.cos - q2 * self.sin, q2 * self.cos + q1 * self.sin], dim=-1)
        return out.to(q.dtype)


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim, dtype=dtype)]


def get_init_inputs():
    return [seq_len, head_dim, rope_base]


def FLOPS():
    # per rotated pair: four multiplies and two adds, i.e. three per element
    return 3 * batch_size * num_heads * seq_len * head_dim


def BYTES():
    # q read and out written once; the two fp32 tables read once (shared by batch and heads)
    return (2 * batch_size * num_heads * seq_len * head_dim * dtype.itemsize
            + 2 * seq_len * (head_dim // 2) * 4)
