# expect: correct
# problem: rope
# rotary embedding: one program per (batch*head, position) row, both halves loaded with a half-width mask, fp32 cos/sin buffers kept under the reference's names
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rope(q_ptr, cos_ptr, sin_ptr, out_ptr, seq_len, half, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)          # (batch * head) * seq_len + pos
    pos = row % seq_len
    j = tl.arange(0, BLOCK)
    m = j < half
    base = row * (2 * half)
    q1 = tl.load(q_ptr + base + j, mask=m, other=0.0).to(tl.float32)
    q2 = tl.load(q_ptr + base + half + j, mask=m, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + pos * half + j, mask=m, other=0.0)
    s = tl.load(sin_ptr + pos * half + j, mask=m, other=0.0)
    tl.store(out_ptr + base + j, (q1 * c - q2 * s).to(out_ptr.dtype.element_ty), mask=m)
    tl.store(out_ptr + base + half + j, (q2 * c + q1 * s).to(out_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, seq_len: int, head_dim: int, rope_base: float):
        super().__init__()
        # same buffer names and shapes as the reference; its state_dict fills them in
        self.register_buffer("cos", torch.zeros(seq_len, head_dim // 2, dtype=torch.float32))
        self.register_buffer("sin", torch.zeros(seq_len, head_dim // 2, dtype=torch.float32))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        q = q.contiguous()
        seq_len, head_dim = q.shape[-2], q.shape[-1]
        half = head_dim // 2
        out = torch.empty_like(q)
        rows = q.numel() // head_dim
        _rope[(rows,)](q, self.cos.contiguous(), self.sin.contiguous(), out, seq_len, half,
                       BLOCK=triton.next_power_of_2(half))
        return out
