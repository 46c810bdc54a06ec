"""cuda.timing's L2 flush modes, on the CPU with the CUDA device properties stood in for: "write"
overwrites the buffer (the default, the method behind every figure so far), "read" reads it and
leaves it as it was, "none" keeps no buffer at all, and a mode that is not one says which are."""
from types import SimpleNamespace

import pytest
import torch

from megakernel_gym.cuda.timing import FLUSH_MODES, L2Flusher, time_gpu


class _CpuTorch:
    """torch with a CUDA device's L2 size (1 KB) and every buffer on the CPU."""
    cuda = SimpleNamespace(get_device_properties=lambda d: SimpleNamespace(L2_cache_size=1024))
    int32 = torch.int32

    @staticmethod
    def empty(n, dtype, device):
        return torch.empty(n, dtype=dtype)


def test_each_flush_mode_touches_the_buffer_its_way():
    write = L2Flusher(_CpuTorch, 0)
    assert write.mode == "write" and write.buf.numel() * 4 == 2 * 1024   # twice L2, the default mode
    write.buf.fill_(7)
    write()
    assert int(write.buf.abs().sum()) == 0                               # overwritten
    read = L2Flusher(_CpuTorch, 0, "read")
    assert read.buf.numel() * 4 == 2 * 1024 and int(read.buf.abs().sum()) == 0   # zeroed once, at set-up
    read.buf.fill_(7)
    read()
    assert bool((read.buf == 7).all())                                   # read, left as it was
    none = L2Flusher(_CpuTorch, 0, "none")
    assert none.buf is None
    none()
    assert FLUSH_MODES == ("write", "read", "none")


def test_a_flush_mode_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="flush mode 'cold' is not one of write, read, none"):
        L2Flusher(_CpuTorch, 0, "cold")
    with pytest.raises(ValueError, match="flush mode 'cold'"):   # before any timing starts
        time_gpu(SimpleNamespace(cuda=SimpleNamespace(current_device=lambda: 0,
                                                      get_device_properties=_CpuTorch.cuda.get_device_properties)),
                 lambda a: None, lambda k: None, flush="cold")
