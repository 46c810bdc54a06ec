"""What the judge's GPU accounting costs a timed kernel: the same calls timed inside and outside a
KernelSession (CUPTI activity records through torch.profiler), alternating, in one process.

    python bench/cupti_overhead.py [--rounds 5]

Kernels: the shipped Triton references of softmax, rmsnorm and matmul_bias_relu at their problems' GPU
sizes (one, one and one large launch per call) and a 20-launch chain of a small copy kernel (launch-bound,
where per-launch costs show most). Writes bench/results/cupti_overhead.json: per kernel the medians in and
out of a session, their ratio, and the target that the accounting moves no median by more than 2%.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import torch
    import triton
    import triton.language as tl

    from bench.judge_bench import write
    from megakernel_gym.curriculum import get_problem, reference_candidates
    from megakernel_gym.rewards.kernel_accounting import KernelSession, judge_stream
    from megakernel_gym.rewards.worker_env import Env, _load_module
    from megakernel_gym.cuda.timing import time_gpu

    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    import tempfile
    tmp = tempfile.mkdtemp(prefix="cupti-")   # Triton reads a kernel's source back from its file
    env = Env("gpu")
    cases = {}
    for name in ("softmax", "rmsnorm", "matmul_bias_relu"):
        problem = get_problem(name)
        mod = env.problem(problem.source, name, tmp)
        cand = _load_module(reference_candidates(name)["triton"].source, f"ref_{name}", tmp, f"ref_{name}.py")
        model = env.model(cand.ModelNew, mod, 42)
        cases[name] = (lambda xs, m=model: m(*xs), lambda k, mod=mod: env.inputs(mod, {"seed": 1000 + k,
                                                                                     "transform": ["plain", 1, 0]}))
    small = torch.randn(1 << 16, device="cuda")

    def chain(xs):
        y = xs[0]
        for _ in range(20):
            z = torch.empty_like(y)
            _copy[(triton.cdiv(y.numel(), 1024),)](y, z, y.numel(), BLOCK=1024)
            y = z
        return y
    cases["copy_chain_20"] = (chain, lambda k: [small.clone()])

    side = judge_stream(torch)
    timing = {"min_iters": 30, "max_iters": 200, "max_seconds": 2.0, "target_rel_err": 0.005, "warmup": 3}
    rows, targets = [], []
    with torch.no_grad():
        for name, (fn, prepare) in cases.items():
            inside, outside = [], []
            for _ in range(a.rounds):
                outside.append(time_gpu(torch, fn, prepare, judge_stream=side, **timing)["median_ms"])
                with KernelSession(torch, side) as session:
                    inside.append(time_gpu(torch, fn, prepare, judge_stream=side, **timing)["median_ms"])
                assert session.kernels, f"{name}: the session recorded no kernel"
            mi, mo = statistics.median(inside), statistics.median(outside)
            rows.append({"kernel": name, "in_session_median_ms": round(mi, 5), "outside_median_ms": round(mo, 5),
                         "ratio": round(mi / mo, 4), "in_session_ms": inside, "outside_ms": outside,
                         "kernels_seen": sorted(session.kernels)[:5]})
            print(rows[-1]["kernel"], rows[-1]["in_session_median_ms"], rows[-1]["outside_median_ms"],
                  rows[-1]["ratio"], flush=True)
            targets.append({"target": f"{name}: accounting moves the median by at most 2%",
                            "measured": rows[-1]["ratio"], "met": abs(mi / mo - 1) <= 0.02})
    write("cupti_overhead", rows, targets, ROOT / "bench" / "results", prefix="",
          notes="each round times the kernel outside, then inside, a KernelSession; medians of the rounds' medians")


if __name__ == "__main__":
    main()
