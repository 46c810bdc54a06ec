"""Admission by memory (issue 41, item 2): the judges that share a GPU take its memory in turn, so that
evaluations running side by side never add up to more than the card holds.

KernelBench as it ships has problems with 4-16 GiB inputs; four judges on one GPU each building such a
problem's inputs, references and baselines at once ran out of memory (5 of 30 leaderboard answers judged
`runtime_error` for it). Each evaluation now says what it needs before it builds anything on the GPU
(`gpu_need`, from the problem's footprint on the meta device: reference_role.footprint) and holds that much of
its GPU's `GpuMemory` while it runs. One that needs more than the whole budget runs alone: it waits for
the GPU to empty, and nothing else is admitted beside it. Requests are served first come, first served,
so a large problem is not passed over forever by a stream of small ones.
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading
import time

GIB = 1 << 30
CONTEXT_BYTES = 600 << 20     # a worker's CUDA context and torch's allocator, before it holds a tensor
# What a reference worker keeps between commands (fixed seeds' outputs, a problem's model: worker_env.Env),
# and the cached blocks any worker may keep after a command (worker_env._free_cached gives back more)
RESIDENT_BYTES = 1 << 30
LINGER_BYTES = 256 << 20
MARGIN = 1.25                 # what the footprint does not count: intermediates, the allocator's rounding


def gpu_need(fp: dict | None) -> int:
    """Bytes of GPU memory one evaluation holds at its peak, both workers together, from a problem's
    footprint ({"inputs", "params", "outputs"} bytes; reference_role.footprint). Its phases run one at a time,
    and between commands a worker gives back what it does not keep (sandbox.worker_main), so the peak is
    the busiest phase's worker beside the other's resident model:
    - the reference's baselines: a seed's inputs as they are built (three: drawn, scaled, shifted), a
      timed call's copy and the CUDA graph's static copy, the outputs of two calls, its model and the
      baseline model's parameters;
    - the candidate's timing: a timed call's inputs as they are built, the output of the call running and a
      contiguous copy of it as a kept call's is written to the channel (since red team 22 the re-checked calls'
      outputs leave the GPU as each call ends; they had been held there, judge.RECHECKED and the last, which
      the 5 outputs below still leave room for), its parameters;
    - the compare, a piece at a time (correctness.COMPARE_CHUNK): the reference's and the candidate's
      outputs.
    About 3 inputs, 5 outputs and 3 parameter sets. Intermediates (a convolution's workspace, a model's
    activations) are not in the footprint: MARGIN is all that covers them. 0 where the footprint is
    unknown (the problem does not run on the meta device): such a problem is admitted as small."""
    if not fp:
        return 0
    return int(MARGIN * (3 * fp["inputs"] + 5 * fp["outputs"] + 3 * fp["params"]))


def measured_need(peak_reserved: int, fp: dict | None) -> int:
    """An evaluation's need from the reference worker's measured peak over its reference run, compile and
    baselines (the busiest worker), with the margin, beside the candidate worker's resident model."""
    return int(MARGIN * peak_reserved) + (int(fp["params"]) if fp else 0)


def host_need(fp: dict | None, files: int) -> int:
    """Bytes of the host's shared memory one evaluation's result channel holds at its peak: `files`
    copies of the problem's outputs (each seed's, then the re-checked timed calls'), which the candidate
    worker writes to /dev/shm and the reference worker reads back (correctness.write_outputs)."""
    return int(fp["outputs"]) * files if fp else 0


class GpuMemory:
    """A memory the judges sharing it take in turn: one GPU's, shared by its LocalPool slots (gpu_budgets),
    or the host's shared memory that every slot's result channel writes to (host_budget). `capacity`
    bytes, taken and given back by evaluations (`hold`). Thread-safe."""

    def __init__(self, capacity: int, name: str = "gpu", learned: dict | None = None,
                 learned_lock: threading.Lock | None = None):
        if capacity <= 0:
            raise ValueError(f"{name}: a GPU memory budget must be positive, got {capacity} bytes")
        self.capacity = int(capacity)
        self.name = name
        self.used = 0
        self.running = 0
        self.peak = 0                 # the most bytes ever held at once (what tests and benches read)
        self.alone = False            # an evaluation that needs more than the capacity is running
        # a problem's need as measured (learn): the footprint does not see intermediates, a convolution's
        # workspace or a model's activations (31 of 136 KernelBench problems peaked above gpu_need)
        # (shared by a pool's GPUs, gpu_budgets: a problem's baselines run on one of them, once)
        self.learned: dict[str, int] = {} if learned is None else learned
        self._learned_lock = learned_lock or threading.Lock()
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()

    def _fits(self, need: int) -> bool:
        if self.alone:
            return False              # one that needs more than the whole GPU has it to itself
        if self.running == 0:
            return True               # alone on the GPU, whatever it needs
        return need <= self.capacity - self.used

    def learn(self, key: str, nbytes: int) -> None:
        """A problem's peak as measured (judge.Judge.baselines: the reference worker's), kept for the
        evaluations of it that follow on this memory's slots; only ever raised."""
        with self._learned_lock:
            self.learned[key] = max(self.learned.get(key, 0), int(nbytes))

    def need(self, key: str, estimate: int) -> int:
        """What an evaluation of problem `key` holds: the estimate from its footprint, or what was
        measured of it, whichever is more."""
        with self._learned_lock:
            return max(int(estimate), self.learned.get(key, 0))

    @contextlib.contextmanager
    def hold(self, need: int, timeout: float | None = None):
        """Hold `need` bytes for the block, in turn (first come, first served). A need over the capacity
        waits for the GPU to empty and holds all of it, alone. TimeoutError after `timeout` seconds of
        waiting (None: as long as it takes)."""
        need = max(0, int(need))
        alone = need > self.capacity
        ticket = object()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or not self._fits(need):
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"{self.name}: waited {timeout:.0f} s for {need / GIB:.2f} GiB "
                                           f"({self.used / GIB:.2f} of {self.capacity / GIB:.2f} GiB held)")
                    self._cond.wait(left)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
            taken = self.capacity if alone else need
            self.used += taken
            self.running += 1
            self.alone = alone
            self.peak = max(self.peak, self.used)
        try:
            yield taken
        finally:
            with self._cond:
                self.used -= taken
                self.running -= 1
                if alone:
                    self.alone = False
                self._cond.notify_all()


def gpu_budgets(devices: int, slots_per_gpu: int) -> list[GpuMemory]:
    """One GpuMemory per visible GPU: its total memory less what every slot's workers hold between
    evaluations (the two workers' contexts and the cached blocks they may keep, a spare candidate worker's
    context (a Judge with recycle="always" keeps one), the reference's resident caches)."""
    import torch
    per_slot = 2 * (CONTEXT_BYTES + LINGER_BYTES) + CONTEXT_BYTES + RESIDENT_BYTES
    learned: dict[str, int] = {}       # measured needs, one table for all of them
    lock = threading.Lock()
    out = []
    for g in range(devices):
        total = torch.cuda.get_device_properties(g).total_memory
        out.append(GpuMemory(max(GIB, total - slots_per_gpu * per_slot), name=f"cuda:{g}", learned=learned,
                             learned_lock=lock))
    return out


def host_budget(path: str = "/dev/shm") -> GpuMemory:
    """The shared memory the result channels write to (the workers' folders are under /dev/shm where it
    exists: workers.WorkerProcess): 80% of what is free there now, and of the host's available memory
    (tmpfs pages are memory), shared by every slot of a pool."""
    free = None
    try:
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
    except OSError:
        pass
    avail = _mem_available()
    known = [x for x in (free, avail) if x]
    return GpuMemory(max(GIB, int(0.8 * min(known))) if known else 1 << 62, name=f"host {path}")


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
