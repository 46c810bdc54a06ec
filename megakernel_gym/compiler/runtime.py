"""Runtime: compile a plan's megakernel with NVRTC, lay out its tensors and task table on the GPU,
launch it through CuPy on torch's stream, and report a trapped wait as an error naming the
task and counter (never a hung GPU: the spin budget ends every wait).

    mk = Megakernel(plan)                       # NVRTC compile (cubin cached by source hash)
    out = mk.run(params, inputs)                # {output or written buffer: tensor}, like run_graph
"""
from __future__ import annotations

import torch
from torch import Tensor

from megakernel_gym.compiler.codegen import THREADS, emit_cuda
from megakernel_gym.compiler.interpret import bind_tensors, torch_dtype
from megakernel_gym.compiler.schedule import Plan

DEFAULT_SPIN_BUDGET = 1 << 22      # polls of ~64 ns each: a wait that lasts ~0.3 s is a bug, not a slow producer


class MegakernelError(RuntimeError):
    """The kernel stopped: a wait ran out of spins (a schedule the validator should have refused)."""


class Megakernel:
    def __init__(self, plan: Plan, spin_budget: int = DEFAULT_SPIN_BUDGET):
        from megakernel_gym.rewards.nvrtc import load_cuda
        self.plan = plan
        self.source, self.table = emit_cuda(plan)
        self.module = load_cuda(self.source, "megakernel.cu")
        self.spin_budget = spin_budget
        self._device_table = None

    def _upload(self, device) -> dict[str, Tensor]:
        if self._device_table is None:
            t = self.table
            i32 = lambda xs: torch.tensor(xs or [0], dtype=torch.int32, device=device)  # noqa: E731
            self._device_table = {
                "q_start": i32(t.q_start), "q_task": i32(t.q_task), "call_start": i32(t.call_start),
                "call_op": i32(t.call_op), "call_lo": i32(t.call_lo), "call_hi": i32(t.call_hi),
                "call_slots": i32(t.call_slots), "slot_args": i32(t.slot_args),
                "wait_start": i32(t.wait_start), "wait_counter": i32(t.wait_counter),
                "wait_target": i32(t.wait_target), "signal_start": i32(t.signal_start),
                "signal_counter": i32(t.signal_counter)}
        return self._device_table

    def run(self, params: dict[str, Tensor], inputs: dict[str, Tensor], trace: bool = False) -> dict[str, Tensor]:
        g = self.plan.tg.graph
        device = torch.device("cuda", torch.cuda.current_device())
        env = bind_tensors(g, {k: v.to(device) for k, v in params.items()},
                           {k: v.to(device) for k, v in inputs.items()}, "Megakernel.run")
        slots: list[Tensor | None] = [None] * len(self.table.slots)
        for name, i in self.table.slots.items():
            spec = g.tensors[name]
            t = env.get(name)
            if t is None:   # activations and outputs: poisoned so an unwritten element shows up
                t = torch.full(spec.shape, float("nan"), dtype=torch_dtype(spec.dtype), device=device) \
                    if torch_dtype(spec.dtype).is_floating_point else \
                    torch.zeros(spec.shape, dtype=torch_dtype(spec.dtype), device=device)
            slots[i] = t.contiguous()
        ptrs = torch.tensor([t.data_ptr() for t in slots], dtype=torch.int64, device=device)
        tab = self._upload(device)
        counters = torch.zeros(max(1, self.table.num_counters), dtype=torch.int32, device=device)
        status = torch.zeros(3, dtype=torch.int32, device=device)
        trace_buf = torch.zeros(2 * len(self.plan.tg.tasks), dtype=torch.int64, device=device) if trace else None
        fn = self.module.get_function("megakernel")
        fn((len(self.plan.queues),), (THREADS,),
           (ptrs, tab["q_start"], tab["q_task"], tab["call_start"], tab["call_op"], tab["call_lo"], tab["call_hi"],
            tab["call_slots"], tab["slot_args"], tab["wait_start"], tab["wait_counter"], tab["wait_target"], tab["signal_start"],
            tab["signal_counter"], counters, self.spin_budget, status, trace_buf if trace else 0))
        try:
            torch.cuda.synchronize()
        except RuntimeError as e:   # a trap leaves the CUDA context unusable: status cannot be read back
            raise MegakernelError(f"the megakernel trapped ({e}): a wait ran out of spins or a task faulted; "
                                  "run the plan in the CPU VM (compiler.run_plan) to find which") from e
        if int(status[0]):
            task, counter = int(status[1]), int(status[2])
            raise MegakernelError(f"task {self.plan.tg.tasks[task]} waited on counter "
                                  f"{self.plan.counters[counter].name} past the spin budget")
        mem = lambda n: slots[self.table.slots[self.table.aliases[n]]].view(g.tensors[n].shape)  # noqa: E731
        out = {name: mem(name) for name in g.outputs}
        out.update({name: mem(name) for name in g.written_buffers()})
        self.last_trace = trace_buf
        return out


__all__ = ["Megakernel", "MegakernelError", "DEFAULT_SPIN_BUDGET"]
