"""How fast an output crosses the result channel (issue 41): a GPU tensor to a file in /dev/shm (the candidate
worker's side) and a file back to the GPU (the reference worker's side), one core and one torch thread, as a
judge's GPU worker runs (`sandbox._pin_cpu`). Run on a GPU host:

    python bench/channel_io.py [--gib 4] [--reps 3] [--core 3] [--out DIR]

Ways compared, side by side in one run, each on the same tensor and checked byte for byte:
  write  staged    the judge's way (correctness.write_outputs): D2H into a 256 MiB pinned buffer, then write()
         registered  the file mapped (MAP_SHARED) and registered with the driver in 256 MiB windows
                   (cuMemHostRegister), the DMA engine writing the file's pages with no CPU copy. Measured
                   no faster than staged on an H200 (allocating and zeroing the fresh pages is the cost
                   either way), so the judge does not use it
         pageable  the file mapped, D2H into the mapping through the driver's own staging
  read   staged    readinto a 256 MiB pinned buffer, then H2D (the judge's way before this bench)
         registered  the judge's way now (correctness._read_file): the file mapped read-only and registered
                   in windows (CU_MEMHOSTREGISTER_READ_ONLY), H2D from it
         pageable  the file mapped, H2D from the mapping through the driver's staging
Writes bench/results/channel_io.json (GB/s per way: median, min, max).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import json
import mmap
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WINDOW = 256 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _map(fd: int, nbytes: int, write: bool) -> int:
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
    ptr = _libc.mmap(None, nbytes, prot, mmap.MAP_SHARED, fd, 0)
    if ptr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    return ptr


def _host(torch, ptr: int, nbytes: int):
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)


def write_staged(torch, src, path):
    """The judge's way (correctness.write_outputs): D2H into the pinned buffer, then write() it, a piece at a time."""
    from megakernel_gym.rewards import correctness as c
    raw = src.reshape(-1).view(torch.uint8)
    with open(path, "wb", buffering=0) as f:
        for off in range(0, raw.numel(), c.STAGING_BYTES):
            piece = raw[off:off + c.STAGING_BYTES]
            host = c._staging(torch, piece.numel(), raw.device)
            host.copy_(piece)
            c._write_all(f, memoryview(host.numpy()))


@contextlib.contextmanager
def _new_mapped_file(path, n: int):
    """A new file of n bytes at path, mapped read-write (MAP_SHARED): its address."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, n)
        ptr = _map(fd, n, True)
        try:
            yield ptr
        finally:
            _libc.munmap(ptr, n)
    finally:
        os.close(fd)


def write_registered(torch, src, path):
    """The file mapped (MAP_SHARED) and its pages registered with the driver in windows (cuMemHostRegister),
    the DMA engine writing them with no CPU copy (not the judge's way: no faster, see the module's doc)."""
    from cuda.bindings import driver as cu
    raw = src.reshape(-1).view(torch.uint8)
    n = raw.numel()
    with _new_mapped_file(path, n) as ptr:
        for off in range(0, n, WINDOW):
            k = min(WINDOW, n - off)
            err, = cu.cuMemHostRegister(ptr + off, k, 0)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemHostRegister: {err.name}")
            try:
                _host(torch, ptr + off, k).copy_(raw[off:off + k])
            finally:
                cu.cuMemHostUnregister(ptr + off)


def write_pageable(torch, src, path):
    """The file mapped, D2H into the mapping through the driver's own staging."""
    raw = src.reshape(-1).view(torch.uint8)
    n = raw.numel()
    with _new_mapped_file(path, n) as ptr:
        for off in range(0, n, WINDOW):
            k = min(WINDOW, n - off)
            _host(torch, ptr + off, k).copy_(raw[off:off + k])


def read_staged(torch, path, nbytes):
    """readinto the pinned buffer, then H2D, a piece at a time (the judge's way before this bench)."""
    from megakernel_gym.rewards import correctness as c
    out = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    with open(path, "rb", buffering=0) as f:
        for off in range(0, nbytes, c.STAGING_BYTES):
            n = min(c.STAGING_BYTES, nbytes - off)
            host = c._staging(torch, n, out.device)
            assert c._read_all(f, memoryview(host.numpy())) == n
            out[off:off + n].copy_(host)
    return out


def read_registered(torch, path, nbytes):
    """The judge's way now (correctness._read_file: the file's pages registered read-only, DMA from them)."""
    from megakernel_gym.rewards import correctness
    with open(path, "rb", buffering=0) as f:
        return correctness._read_file(torch, f, "x", nbytes, torch.uint8, [nbytes], torch.device("cuda"))


def read_pageable(torch, path, nbytes):
    out = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    fd = os.open(path, os.O_RDONLY)
    try:
        ptr = _map(fd, nbytes, False)
        try:
            for off in range(0, nbytes, WINDOW):
                k = min(WINDOW, nbytes - off)
                out[off:off + k].copy_(_host(torch, ptr + off, k))
        finally:
            _libc.munmap(ptr, nbytes)
    finally:
        os.close(fd)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--core", type=int, default=3, help="the one core the process runs on (-1: any)")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    import torch
    torch.set_num_threads(1)
    nbytes = int(args.gib * (1 << 30)) // 4 * 4
    src = torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
    path = os.path.join(args.dir, f"mkgym_channel_io_{os.getpid()}_0.bin")
    result: dict = {"name": "channel_io", "device": torch.cuda.get_device_name(0),
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "command": "python " + " ".join(sys.argv), "bytes": nbytes, "core": args.core,
                    "write_GBps": {}, "read_GBps": {}, "errors": {}}
    from megakernel_gym.rewards import correctness
    result["driver_registration"] = correctness._driver() is not None   # else "registered" fell back to staged
    writers = {"staged": write_staged, "registered": write_registered, "pageable": write_pageable}
    readers = {"staged": read_staged, "registered": read_registered, "pageable": read_pageable}
    want = src.view(torch.uint8)
    try:
        for name, fn in writers.items():
            rates = []
            try:
                for _ in range(args.reps):
                    if os.path.exists(path):
                        os.unlink(path)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    fn(torch, src, path)
                    rates.append(nbytes / (time.perf_counter() - t) / 1e9)
                back = read_staged(torch, path, nbytes)
                if not torch.equal(back, want):
                    raise AssertionError("the file differs from the tensor")
                del back
                result["write_GBps"][name] = {"median": round(statistics.median(rates), 2),
                                              "min": round(min(rates), 2), "max": round(max(rates), 2)}
            except Exception as e:
                result["errors"]["write_" + name] = f"{type(e).__name__}: {e}"
            print(name, "write", result["write_GBps"].get(name), flush=True)
        write_staged(torch, src, path)
        for name, fn in readers.items():
            rates = []
            try:
                for _ in range(args.reps):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    back = fn(torch, path, nbytes)
                    torch.cuda.synchronize()
                    rates.append(nbytes / (time.perf_counter() - t) / 1e9)
                    ok = torch.equal(back, want)
                    del back
                    if not ok:
                        raise AssertionError("read back differs")
                result["read_GBps"][name] = {"median": round(statistics.median(rates), 2),
                                             "min": round(min(rates), 2), "max": round(max(rates), 2)}
            except Exception as e:
                result["errors"]["read_" + name] = f"{type(e).__name__}: {e}"
            print(name, "read", result["read_GBps"].get(name), flush=True)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "channel_io.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
