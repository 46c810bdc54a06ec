# expect: correct or runtime_error
# check: judge_memory
# problem: softmax
# family: 10 printing hundreds of megabytes
# an otherwise honest kernel prints 256 MiB once; the worker's log is a file in /dev/shm (RAM) with no size limit, and the judge reads all of it back (WorkerProcess.log_tail reads everything new, then keeps the last 4000 characters): the judge process must not grow with what a candidate prints
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)

CHUNK = "x" * (1 << 20)
DONE = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not DONE:
            DONE.append(1)
            for i in range(256):
                print(CHUNK)
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
