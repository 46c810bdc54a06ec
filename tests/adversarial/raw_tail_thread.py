# expect: rejected guard|concurrency or incorrect mismatch or compile_error triton_compile
# expect-gpu: rejected guard|concurrency or incorrect mismatch or compile_error triton_compile
# problem: softmax
# family: 2 thread started from raw interpreter code
# the jit source-tail trick (see raw_tail_softmax) runs plain Python: it finds threading.Thread through object.__subclasses__() and runs torch.softmax on a thread it joins (the watcher is per thread)
import torch
import torch.nn as nn
import triton
import triton.language as tl
JOB = []


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    note = """
def _k(x_ptr, BLOCK: tl.constexpr):
    x, y = JOB[0]
    Th = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "Thread" and c.__module__ == "threading"][0]
    t = Th(target=lambda: y.copy_(torch.softmax(x, -1)))
    t.start()
    t.join()  # """


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        JOB.clear()
        JOB.append((x, y))
        _k[(1,)](x, BLOCK=16)
        return y
