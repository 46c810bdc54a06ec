"""The megakernel compiler: model -> graph IR -> tile task graph -> schedule -> megakernel | CPU VM.

    capture (capture.py)        nn.Module -> Graph of PRIMITIVES (graph.py); run_graph is its meaning
    lower (tasks.py)            Graph -> TaskGraph: tile tasks, regions, derived dependencies
    build_plan (schedule.py)    TaskGraph + Knobs -> Plan: per-SM queues, counters, waits
    validate (validate.py)      Plan -> proven free of deadlock and races, or ScheduleError
    simulate / run_plan (vm.py) Plan -> executed on the CPU with real counter semantics
    predict (costmodel.py)      Plan -> predicted latency on a GPU (the sim backend)

`ZOO` holds the models the pipeline is built and tested on; families.py takes transformers' own
causal LMs (Llama, Qwen2, Qwen3, Mistral) through adapters onto the same primitives.
"""
from megakernel_gym.compiler.capture import capture, module_tensors
from megakernel_gym.compiler.costmodel import DEVICES, DeviceSpec, Prediction, predict, task_costs
from megakernel_gym.compiler.graph import (PRIMITIVES, TENSOR_KINDS, Graph, Op, TensorSpec,
                                           UnsupportedOpError)
from megakernel_gym.compiler.interpret import reference_op, run_graph
from megakernel_gym.compiler.schedule import Counter, Knobs, Plan, build_plan, default_knobs
from megakernel_gym.compiler.tasks import Region, Task, TaskGraph, TilingError, lower
from megakernel_gym.compiler.validate import Finding, ScheduleError, check, validate
from megakernel_gym.compiler.vm import (DeadlockError, RaceError, SimResult, VMError, VMResult, execute_plan,
                                        run_plan, simulate)
from megakernel_gym.compiler.zoo import ZOO, AttentionBlock, LlamaConfig, LlamaDecoder, MLPBlock

__all__ = ["capture", "run_graph", "reference_op", "module_tensors", "ZOO", "LlamaConfig",
           "LlamaDecoder", "MLPBlock", "AttentionBlock", "Graph", "Op", "TensorSpec",
           "PRIMITIVES", "TENSOR_KINDS", "UnsupportedOpError", "lower", "Task", "TaskGraph", "Region",
           "TilingError", "Knobs", "Plan", "Counter", "build_plan", "default_knobs", "check", "validate",
           "ScheduleError", "Finding", "simulate", "SimResult", "run_plan", "execute_plan", "VMResult",
           "VMError", "DeadlockError", "RaceError", "predict", "task_costs", "DEVICES",
           "DeviceSpec", "Prediction"]
