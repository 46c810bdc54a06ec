"""GPU timing that holds up (runs inside a worker process, never in the judge).

Per timed call: fresh inputs (built outside the timed region), an L2 flush, a device-wide
sync, CUDA events around the call alone, then a device-wide sync and a host clock read so
work that escapes the events on another stream shows as a gap between the two clocks.
At least `min_iters` calls; then stop once the median's relative standard error is small.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable


def summarize(samples_ms: list[float]) -> dict[str, Any]:
    s = sorted(samples_ms)
    n = len(s)
    q = lambda p: s[min(n - 1, max(0, int(round(p * (n - 1)))))]  # noqa: E731
    med = statistics.median(s)
    return {
        "median_ms": med, "mean_ms": statistics.fmean(s), "min_ms": s[0], "max_ms": s[-1],
        "p10_ms": q(0.10), "p90_ms": q(0.90),
        "iqr_ms": q(0.75) - q(0.25),
        "std_ms": statistics.pstdev(s) if n > 1 else 0.0,
        "samples": n,
    }


def rel_stderr_of_median(samples: list[float]) -> float:
    n = len(samples)
    if n < 3:
        return math.inf
    med = statistics.median(samples)
    # 1.2533 * sigma / sqrt(n): the median's standard error for a normal sample; the spread
    # is estimated robustly from the IQR so a few preempted calls don't keep us running.
    s = sorted(samples)
    iqr = s[(3 * n) // 4] - s[n // 4]
    sigma = iqr / 1.349
    return 1.2533 * sigma / math.sqrt(n) / med if med > 0 else math.inf


class L2Flusher:
    """Overwrites a buffer larger than L2 so every timed call starts with a cold cache."""

    def __init__(self, torch, device):
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20
        self.buf = torch.empty(int(2 * l2) // 4, dtype=torch.int32, device=device)

    def __call__(self):
        self.buf.zero_()


def time_gpu(torch, fn: Callable[[int], Any], prepare: Callable[[int], Any], *, min_iters: int = 30,
             max_iters: int = 300, max_seconds: float = 4.0, target_rel_err: float = 0.005,
             warmup: int = 3, keep_outputs: int = 0) -> dict[str, Any]:
    """Time `fn(args)` on fresh `prepare(k)` arguments per call k.

    Returns summary stats (event time), the host wall gap, and the outputs of the last
    `keep_outputs` calls with their call indices (for re-checking timed outputs).
    """
    flush = L2Flusher(torch, torch.cuda.current_device())
    start_ev = torch.cuda.Event(enable_timing=True)
    end_ev = torch.cuda.Event(enable_timing=True)
    for k in range(warmup):
        fn(prepare(-1 - k))
    torch.cuda.synchronize()

    event_ms: list[float] = []
    wall_ms: list[float] = []
    kept: list[tuple[int, Any]] = []
    t_begin = time.perf_counter()
    k = 0
    while k < max_iters:
        args = prepare(k)
        flush()
        torch.cuda.synchronize()
        w0 = time.perf_counter()
        start_ev.record()
        out = fn(args)
        end_ev.record()
        torch.cuda.synchronize()
        w1 = time.perf_counter()
        event_ms.append(start_ev.elapsed_time(end_ev))
        wall_ms.append((w1 - w0) * 1e3)
        if keep_outputs:
            kept.append((k, out))
            kept = kept[-keep_outputs:]
        k += 1
        if k >= min_iters and (rel_stderr_of_median(event_ms) < target_rel_err
                               or time.perf_counter() - t_begin > max_seconds):
            break
    stats = summarize(event_ms)
    stats["wall_median_ms"] = statistics.median(wall_ms)
    stats["rel_stderr"] = rel_stderr_of_median(event_ms)
    stats["kept"] = kept
    return stats
