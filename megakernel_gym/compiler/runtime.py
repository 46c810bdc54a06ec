"""Runtime: compile a plan's megakernel with NVRTC, lay out its tensors and task table on the GPU,
launch it through CuPy on torch's stream, and report a trapped wait as an error naming the
task and counter (never a hung GPU: the spin budget ends every wait).

    mk = Megakernel(plan, impls=ir.impls)       # NVRTC compile (cubin cached by source hash)
    out = mk.run(params, inputs)                # {output or written buffer: tensor}, like run_graph
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from megakernel_gym.compiler.codegen import emit_cuda
from megakernel_gym.compiler.hops import LL_WORD_BYTES
from megakernel_gym.compiler.interpret import bind_tensors, torch_dtype
from megakernel_gym.compiler.schedule import Plan

DEFAULT_SPIN_BUDGET = 1 << 22      # polls of ~64 ns each: a wait that lasts ~0.3 s is a bug, not a slow producer


class MegakernelError(RuntimeError):
    """The kernel stopped: a wait ran out of spins (a schedule the validator should have refused)."""


class ImplFaultError(MegakernelError):
    """An impl body indexed outside what its view allows (compiler/impl_guard.py): the access was not
    performed, the kernel ran on, and the CUDA context is intact."""


def megakernel_arch(table, arch: str | None = None) -> str:
    """The arch to compile a megakernel for: the GPU's (or `arch`, named by a process with no GPU that fills
    the compile cache for one), made Hopper's arch-specific sm_90a where the kernel gives its compute warps
    more registers with setmaxnreg (codegen's maxnreg), which only sm_90a has."""
    if arch is None:
        from megakernel_gym.cuda.nvrtc import _default_arch
        arch = _default_arch()
    return arch + "a" if table.maxnreg and arch == "sm_90" else arch


class Megakernel:
    def __init__(self, plan: Plan, spin_budget: int = DEFAULT_SPIN_BUDGET, prefetch_mode: str = "bulk",
                 impls: dict[str, str] | None = None, weights: str = "smem", stream: str = "smem",
                 **ring):
        """impls: op -> task body (the IR's `impl` edits, `ir.impls`), compiled in place of the generated one.
        weights: "smem" (streamed matmuls fed by the weight ring) or "regs"; stream: "smem" (each queue's
        task stream read from shared memory where it fits) or "global"; ring: emit_cuda's other knobs
        (the weight ring's ring_stages, l2_ahead and l2_wait; probes; control_warp; hops; combine; producer)."""
        from megakernel_gym.cuda.nvrtc import IMPL_COMPILE_TIMEOUT_S, CudaCompileError, load_cuda
        self.plan = plan
        self.impls = dict(impls or {})
        self.source, self.table = emit_cuda(plan, prefetch_mode, impls, weights, stream, **ring)
        # the source includes nothing, so NVRTC gets no include path; agent code compiles in a process
        # of its own under a time limit
        try:
            self.module = load_cuda(self.source, "megakernel.cu", arch=megakernel_arch(self.table),
                                    host_includes=False, timeout_s=IMPL_COMPILE_TIMEOUT_S if self.impls else None)
        except CudaCompileError as e:
            e.source = self.source      # for compile_log_for_agent: which lines are whose
            raise
        self.spin_budget = spin_budget
        self._device_table = None

    def _upload(self, device) -> dict[str, Tensor]:
        if self._device_table is None:
            t = self.table
            i32 = lambda xs: torch.tensor(xs or [0], dtype=torch.int32, device=device)  # noqa: E731
            self._device_table = {
                "slot_args": i32(t.slot_args), "q_stream": i32(t.q_stream), "qs_start": i32(t.qs_start),
                "ws_start": i32(t.ws_start), "ws_slot": i32(t.ws_slot),
                "ws_offset": torch.tensor(t.ws_offset or [0], dtype=torch.int64, device=device),
                "ws_rows": i32(t.ws_rows), "ws_rowb": i32(t.ws_rowb)}
        return self._device_table

    def bind(self, params: dict[str, Tensor], inputs: dict[str, Tensor], trace: bool = False) -> "Launch":
        """Lay the tensors out on the GPU once; the Launch then runs the kernel as often as asked."""
        g = self.plan.tg.graph
        device = torch.device("cuda", torch.cuda.current_device())
        env = bind_tensors(g, {k: v.to(device) for k, v in params.items()},
                           {k: v.to(device) for k, v in inputs.items()}, "Megakernel.bind")
        slots: list[Tensor] = [None] * (len(self.table.slots) + len(self.table.scratch))  # type: ignore[list-item]
        for i, nbytes in self.table.scratch.values():   # split attention's arrival counts start at zero, once
            slots[i] = torch.zeros(-(-nbytes // 16) * 4, dtype=torch.int32, device=device)
        fresh = []
        for name, i in self.table.slots.items():
            spec = g.tensors[name]
            t = env.get(name)
            if name in self.table.ll:   # LL words (compiler/hops.py): zero is no launch's word
                t = torch.zeros(spec.shape, dtype={4: torch.int32, 8: torch.int64}[LL_WORD_BYTES[spec.dtype]],
                                device=device)
                fresh.append(i)
            elif t is None:   # activations and outputs: poisoned so an unwritten element shows up
                dt = torch_dtype(spec.dtype)
                t = torch.empty(spec.shape, dtype=dt, device=device)
                fresh.append(i)
            t = t.contiguous()
            slots[i] = t if t.data_ptr() % 16 == 0 else t.clone()   # 16-byte loads need 16-byte alignment
        launch = Launch(self, slots, device, trace, fresh)
        launch.poison()
        return launch

    def run(self, params: dict[str, Tensor], inputs: dict[str, Tensor], trace: bool = False) -> dict[str, Tensor]:
        """One decode step: {graph output or written buffer: tensor}, as run_graph returns."""
        launch = self.bind(params, inputs, trace)
        launch()
        launch.check()
        self.last_trace = launch.trace
        return launch.outputs()


class Launch:
    """A megakernel bound to its tensors: call it to enqueue one run on torch's current stream
    (counters reset first); check() after a sync turns a failed wait into MegakernelError."""

    def __init__(self, mk: Megakernel, slots: list[Tensor], device, trace: bool, fresh: list[int] = ()):
        self.mk, self.slots, self.fresh = mk, slots, list(fresh)
        self.epoch = 0
        self.ptrs = torch.tensor([t.data_ptr() for t in slots], dtype=torch.int64, device=device)
        self.tab = mk._upload(device)
        self.counters = torch.zeros(max(1, mk.table.num_counters), dtype=torch.int32, device=device)
        self.status = torch.zeros(3, dtype=torch.int32, device=device)
        n = len(mk.plan.tg.tasks)
        self.trace = torch.zeros(mk.table.trace_words * n, dtype=torch.int64, device=device) if trace else None
        self.fn = mk.module.get_function("megakernel")
        if mk.impls:
            self._impl_fault(clear=True)
        self.smem = mk.table.smem_bytes
        if self.smem > 48 * 1024:   # past the default limit a kernel must ask for its dynamic shared memory
            mk.module.set_max_dynamic_smem("megakernel", self.smem)

    def __call__(self) -> None:
        self.counters.zero_()
        self.enqueue()

    def enqueue(self) -> None:
        """Enqueue one run with the counters as they are (__call__ zeroes them first; a diagnostic
        may start them elsewhere). Each run has the next epoch (1-65535, then 1 again), which its
        LL words carry: a word from the run before is never this run's."""
        tab = self.tab
        self.epoch = self.epoch % 65535 + 1
        self.fn((len(self.mk.plan.queues),), (self.mk.table.threads,),
                (self.ptrs, tab["slot_args"], tab["q_stream"], tab["qs_start"], tab["ws_start"], tab["ws_slot"],
                 tab["ws_offset"], tab["ws_rows"], tab["ws_rowb"], self.counters, self.mk.spin_budget,
                 self.status, self.trace if self.trace is not None else 0, np.uint32(self.epoch)), shared_mem=self.smem)

    def poison(self) -> None:
        """Every activation and output buffer back to NaN (integers and LL words to 0), so the next
        run must write all of it again: what an earlier run left there cannot pass for this run's result."""
        for i in self.fresh:
            t = self.slots[i]
            t.fill_(float("nan")) if t.is_floating_point() else t.zero_()

    def input(self, name: str) -> Tensor:
        """The GPU tensor a graph tensor is bound to (views: their base's memory, in the tensor's
        shape); write into an input's to change the next run's input."""
        g, table = self.mk.plan.tg.graph, self.mk.table
        if table.aliases[name] in table.ll:
            raise ValueError(f"{name} is kept as LL words inside the kernel (compiler/hops.py); "
                             "Megakernel(..., hops='counters') keeps it as its dtype")
        return self.slots[table.slots[table.aliases[name]]].view(g.tensors[name].shape)

    def check(self) -> None:
        try:
            torch.cuda.synchronize()
        except RuntimeError as e:   # a trap leaves the CUDA context unusable: status cannot be read back
            raise MegakernelError(f"the megakernel trapped ({e}): a wait ran out of spins or a task faulted; "
                                  "run the plan in the CPU VM (compiler.run_plan) to find which") from e
        if self.mk.impls:
            fault = self._impl_fault(clear=True)
            if fault is not None:
                raise ImplFaultError(fault)
        if int(self.status[0]):
            plan = self.mk.plan
            task, counter = int(self.status[1]), int(self.status[2])
            raise MegakernelError(f"task {plan.tg.tasks[task]} waited on counter {plan.counters[counter].name} "
                                  "past the spin budget")

    def _impl_fault(self, clear: bool = False) -> str | None:
        """The first out-of-range index an impl body made since the last read (compiler/impl_guard.py's
        mk_impl_fault), said in words, or None; clear: zero it for the next run."""
        from megakernel_gym.compiler.impl_guard import FAULT_WHAT
        words = self.mk.module.read_global("mk_impl_fault", 3)
        if clear and words[0]:
            self.mk.module.write_global_zero("mk_impl_fault", 3)
        if not words[0]:
            return None
        what, fid, index = int(words[0]), int(words[1]), int(words.view(np.int64)[2])
        ops = [op for op, f in self.mk.table.op_ids.items() if f == fid and op in self.mk.impls] or [f"op_{fid}"]
        return (f"the impl body of {', '.join(ops)} indexed {FAULT_WHAT.get(what, f'a view ({what})')} at {index}; "
                "a body reads its inputs within their tensors and writes out only inside its task's tile [lo, hi) "
                "along the tile axis (the access was not performed)")

    def outputs(self) -> dict[str, Tensor]:
        g = self.mk.plan.tg.graph
        out = {name: self.input(name) for name in g.outputs}
        out.update({name: self.input(name) for name in g.written_buffers()})
        return out

    def task_times_us(self) -> tuple[list[float], list[float]]:
        """Per task (start, finish) in us from the kernel's first task, read from %globaltimer."""
        if self.trace is None:
            raise ValueError("bind(..., trace=True) to record task times")
        t = self.trace.view(-1, self.mk.table.trace_words)[:, :2].cpu().double()
        t0 = float(t[:, 0][t[:, 0] > 0].min())
        return ((t[:, 0] - t0) / 1e3).tolist(), ((t[:, 1] - t0) / 1e3).tolist()

    def task_probes(self) -> list[dict[str, float]]:
        """Per task, its probes (Megakernel(..., probes=True), bound with trace=True) as us after the
        task's queue reached it: codegen.PROBE_NAMES, from the SM's clock64, converted with the clock
        rate that the tasks' own %globaltimer start and finish give (a probe the task never hit is
        absent)."""
        from megakernel_gym.compiler.codegen import PROBE_NAMES, PROBE_WORDS
        if self.trace is None or self.mk.table.trace_words != PROBE_WORDS:
            raise ValueError("Megakernel(..., probes=True) and bind(..., trace=True) to record probes")
        t = self.trace.view(-1, PROBE_WORDS).cpu().double()
        ns, cyc = t[:, 1] - t[:, 0], t[:, 7] - t[:, 3]
        long = (ns > 2000) & (cyc > 0)   # tasks of 2 us or more set the rate (the timer ticks coarsely)
        per_cycle = float((ns[long] / cyc[long]).median()) if bool(long.any()) else 0.5
        out = []
        for row in t.tolist():
            base = row[2]
            out.append({name: (row[2 + i] - base) * per_cycle / 1e3
                        for i, name in enumerate(PROBE_NAMES) if row[2 + i] > 0})
        return out


def time_us(fn, iters: int = 50, prepare=None, flush: str = "write") -> dict:
    """fn's GPU time in us, measured the judge's way (rewards/timing.time_gpu: L2 flushed, launch
    latency hidden, at least `iters` calls): median and spread. prepare(k), if given, runs before
    call k outside the timed region (to change the inputs from call to call); `flush`: how L2 is
    emptied before each call (cuda.timing.FLUSH_MODES)."""
    from megakernel_gym.cuda.timing import time_gpu
    t = time_gpu(torch, lambda _: fn(), prepare or (lambda k: None), min_iters=iters, max_iters=max(iters, 300),
                 flush=flush)
    return {"median_us": t["median_ms"] * 1e3, "p10_us": t["p10_ms"] * 1e3, "p90_us": t["p90_ms"] * 1e3,
            "n": t["samples"]}


def copy_bandwidth_gbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy, bytes read + written per second: the floor's denominator."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = time_us(lambda: dst.copy_(src), 20)
    return 2 * src.numel() / (t["median_us"] * 1e-6) / 1e9


__all__ = ["Megakernel", "Launch", "MegakernelError", "DEFAULT_SPIN_BUDGET", "time_us", "copy_bandwidth_gbs"]
