"""What both of a judge worker's roles share (rewards/sandbox.py runs them): the problem's module loaded from a
real file, its seeded inputs and models (`Env`: the same seed gives the same tensors in the reference worker
and in the candidate's), outputs as a list, and the memory a worker gives back between commands.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from typing import Any


def _load_module(source: str, name: str, workdir: str, filename: str):
    """Import source from a real file: Triton's @jit reads its function's source back."""
    path = os.path.join(workdir, filename)
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod



class Env:
    def __init__(self, backend: str):
        import torch
        self.torch = torch
        self.backend = backend
        self.device = torch.device("cuda", 0) if backend == "gpu" else torch.device("cpu")
        self.problems: dict[str, Any] = {}
        from collections import OrderedDict
        self.refs: OrderedDict[str, list] = OrderedDict()  # reference role: outputs by spec
        self.models: dict = {}
        self.ref_bytes = 0
        # the reference outputs and models a reference worker keeps between commands (fixed seeds' outputs,
        # a problem's model): at most RESIDENT_BYTES, which admission reserves for every slot
        # (rewards/admission.py); a larger problem's are built again each time (a few ms of GPU work)
        from megakernel_gym.rewards.admission import RESIDENT_BYTES
        self.ref_limit = RESIDENT_BYTES
        # reference role: (problem key, the baselines' model, its torch.compile) from a baselines call with
        # compile_only until the timing call that uses it (handle_baselines)
        self.compiled = None

    @staticmethod
    def problem_sha(source: str) -> str:
        from megakernel_gym.rewards.problem import sha256
        return sha256(source)

    def problem(self, source: str, name: str, workdir: str):
        from megakernel_gym.rewards.problem import sha256
        key = sha256(source)
        mod = self.problems.get(key)
        if mod is None:
            mod = _load_module(source, f"mkgym_problem_{key[:16]}", workdir, f"problem_{key[:16]}.py")
            sizes = getattr(mod, "CPU_SIZES", None) if self.backend == "cpu" else getattr(mod, "GPU_SIZES", None)
            for k, v in (sizes or {}).items():
                setattr(mod, k, v)
            self.problems[key] = mod
        return mod

    def inputs(self, mod, spec: dict) -> list:
        torch = self.torch
        torch.manual_seed(spec["seed"])
        with torch.device(self.device):
            raw = list(mod.get_inputs())
        out = []
        kind, a, b = spec["transform"]
        for x in raw:
            if isinstance(x, torch.Tensor):
                x = x.to(self.device)
                if x.is_floating_point() and kind != "plain":
                    x = x * a + b
                x = x.contiguous()
            out.append(x)
        return out

    def perturbed(self, base: list, scale: float) -> list:
        """Fresh content for a timed call: floating inputs scaled by `scale` (exact IEEE op)."""
        torch = self.torch

        def fresh(x):
            if not isinstance(x, torch.Tensor):
                return x
            if scale == 1.0 or not x.is_floating_point():
                return x.clone()
            if x.element_size() == 1:   # float8 has no multiply kernel; its problems allow no scaling anyway
                return (x.float() * scale).to(x.dtype)
            return x * scale
        return [fresh(x) for x in base]

    def model(self, cls, mod, init_seed: int):
        """cls(*get_init_inputs()) seeded by init_seed, on the judge's device. Its parameters are drawn
        on the device, as get_inputs' tensors are: on an H100, drawing a 32000x4096 table on the host
        (Model and ModelNew, for the fixed and the secret seed, in both workers) took 25 of an
        evaluation's 29 s. Both workers build every model here, so the reference and the candidate get
        the same weights. A class whose __init__ needs host tensors (numpy...) is built on the host
        instead, as before."""
        torch = self.torch
        if self.device.type != "cpu":
            try:
                torch.manual_seed(init_seed)
                init = list(mod.get_init_inputs())
                with torch.device(self.device):
                    return cls(*init).to(self.device).eval()
            except Exception:  # noqa: BLE001 - built again on the host; an error there is the real one
                pass
        torch.manual_seed(init_seed)
        init = list(mod.get_init_inputs())
        m = cls(*init)
        return m.to(self.device).eval()


def as_outputs(torch, out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise TypeError(f"forward returned {type(out).__name__}; expected a tensor or a tuple of tensors")


def _tb(limit: int = 6000) -> str:
    return traceback.format_exc()[-limit:]


def tensor_bytes(ts) -> int:
    """The bytes of a list of tensors' elements."""
    return sum(t.numel() * t.element_size() for t in ts)


# What one call's outputs may hold before any of them is written to the result channel (a folder in the
# host's shared memory, charged to no process's memory limit): a sixth red team's forward returning one
# 40 MB tensor ten times put 2.4 GB in /dev/shm in one step, on a softmax whose output is 16 KB, and the
# bytes grow with the copies while the candidate holds one tensor. MAX_OUTPUTS tensors a call;
# OUTPUT_SLACK times the problem's own outputs' bytes (a wider dtype than the reference's passes) plus
# OUTPUT_FLOOR, or UNKNOWN_OUTPUT_BYTES where the problem's footprint is unknown (reference_role.footprint).
MAX_OUTPUTS = 64
OUTPUT_SLACK = 4
OUTPUT_FLOOR = 1 << 20
UNKNOWN_OUTPUT_BYTES = 512 << 20


def output_cap(fp: dict | None) -> int:
    """The most bytes one call's outputs may hold, from the problem's footprint (None: unknown)."""
    return OUTPUT_SLACK * int(fp["outputs"]) + OUTPUT_FLOOR if fp else UNKNOWN_OUTPUT_BYTES


def outputs_over(outs: list, cap: int | None, expected: int | None = None) -> str:
    """Why a call's outputs may not go to the result channel ("" when they may): more than MAX_OUTPUTS
    tensors, or more than `cap` bytes together (`expected`: the problem's own, for the message)."""
    if len(outs) > MAX_OUTPUTS:
        return (f"forward returned {len(outs)} outputs; at most {MAX_OUTPUTS} are accepted. Return the "
                "problem's outputs, as its Model does")
    n = tensor_bytes(outs)
    if cap is not None and n > cap:
        theirs = f"; the problem's outputs hold {expected:,} bytes" if expected is not None else ""
        return (f"forward returned {n:,} bytes of outputs{theirs} (at most {cap:,} accepted). Return tensors "
                "of the problem's output shapes, each once")
    return ""


def _free_cached(torch) -> None:
    """Give the allocator's cached blocks back to the driver where they are large: the judges beside this
    one on the GPU are admitted against its memory (rewards/admission.py), not against what a worker
    keeps reserved after its peak (admission.LINGER_BYTES is what it may keep)."""
    from megakernel_gym.rewards.admission import LINGER_BYTES
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > LINGER_BYTES:
        torch.cuda.empty_cache()
