# expect: rejected concurrency
# problem: softmax
# family: 2 thread started and joined in forward
# torch compute on a thread that forward starts and joins (the watcher is per thread)
import threading
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        _touch[(1,)](x, 1, BLOCK=16)
        box = []
        t = threading.Thread(target=lambda: box.append(torch.softmax(x, -1)))
        t.start()
        t.join()
        return box[0]
