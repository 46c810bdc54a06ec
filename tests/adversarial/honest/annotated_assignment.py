# expect: correct
# problem: softmax
# family: honest twin of metaclass_keyword / typing_get_type_hints (annotations)
# annotated assignments (x: int = ...), as type-hinted code writes them, at module level and in forward
import torch
import torch.nn as nn
import triton
import triton.language as tl

MIN_BLOCK: int = 16


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y: torch.Tensor = torch.empty_like(x)
        block: int = max(MIN_BLOCK, triton.next_power_of_2(x.shape[1]))
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=block)
        return y
