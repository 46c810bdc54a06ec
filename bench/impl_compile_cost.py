"""What NVRTC costs for megakernels with `impl` bodies, the numbers behind the size caps
(compiler/impl_guard.py MAX_IMPL_TOTAL_CHARS, ir_exposure MAX_IMPL_CHARS) and the compile's time
limit (cuda/nvrtc.py IMPL_COMPILE_TIMEOUT_S).

    python bench/impl_compile_cost.py [--out bench/results/impl_compile_cost.json]

The 1B MLP's megakernel (mlp-1b, 132 SMs), compiled for sm_90 with no include path, each source
made unique (a comment) so the cubin cache never answers: no body, an honest one, a 20k-character
body of straight-line arithmetic (the most one op may have), two of them (the most a plan may have),
and bodies that nest 9,000 parentheses or braces or 4,000 `?:` deep. Each in this process and in a
compile process of its own (the way agent code is compiled), so the child's cost shows too.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def straight(chars: int) -> str:
    lines, i = ["float a = 0.f;"], 0
    while sum(len(x) + 1 for x in lines) < chars - 80:
        lines.append(f"a = a * 1.0001f + bf2f(in0[(lo + {i}) % 8192]) * {i}.5f;")
        i += 1
    lines.append("if (threadIdx.x == 0 && lo < hi) out[lo] = f2bf(a);")
    return "\n".join(lines[:-2] + lines[-1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/impl_compile_cost.json")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.compiler.codegen import emit_cuda
    from megakernel_gym.compiler.impl_guard import MAX_IMPL_TOTAL_CHARS, impl_code_problem
    from megakernel_gym.ir_exposure import make_ir
    from megakernel_gym.ir_exposure.ir import MAX_IMPL_CHARS
    from megakernel_gym.cuda.nvrtc import IMPL_COMPILE_TIMEOUT_S, compile_cuda

    g = capture(*ZOO["mlp-1b"](device="meta"), "mlp-1b")
    plan = make_ir(g, num_sms=132).plan()
    silu = ("const long long w = hi - lo;\nfor (long long i = threadIdx.x; i < out_shape[0] * w; i += blockDim.x) {\n"
            "  const long long k = (i / w) * out_shape[1] + lo + i % w;\n  const float a = bf2f(in0[k]);\n"
            "  out[k] = f2bf(a / (1.f + expf(-a)) * bf2f(in1[k]));\n}\n")
    big = straight(MAX_IMPL_CHARS)
    cases = {
        "no impl": {},
        "honest silu_mul body": {"silu_mul": silu},
        f"one {len(big)}-char straight-line body": {"silu_mul": big},
        f"two {len(big)}-char bodies ({2 * len(big)} chars, the total cap is {MAX_IMPL_TOTAL_CHARS})":
            {"silu_mul": big, "add": big.replace("in0[(lo", "in1[(lo")},
        "9,000 nested parentheses": {"silu_mul": "float a = " + "(" * 9000 + "1.f" + ")" * 9000 + "; out[lo] = f2bf(a);"},
        "9,900 nested braces": {"silu_mul": "{" * 9900 + "}" * 9900},
        "4,000 nested ?:": {"silu_mul": "int x = threadIdx.x; int y = " + "x?" * 4000 + "1" + ":0" * 4000 +
                            "; out[lo] = f2bf((float)y);"},
    }
    rows = []
    for label, impls in cases.items():
        problems = [impl_code_problem(c) for c in impls.values()]
        assert not any(problems), (label, problems)
        src = emit_cuda(plan, impls=impls)[0]
        for where, timeout in (("in process", None), ("child process", IMPL_COMPILE_TIMEOUT_S)):
            times = []
            for r in range(args.repeats):
                nonce = f"\n// {time.time_ns()} {r} {where}\n"
                t0 = time.perf_counter()
                compile_cuda(src + nonce, "megakernel.cu", arch="sm_90", host_includes=False, timeout_s=timeout)
                times.append(time.perf_counter() - t0)
            rows.append({"case": label, "where": where, "body_chars": sum(len(c) for c in impls.values()),
                         "median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
                         "max_s": round(max(times), 3), "samples": len(times)})
            print(json.dumps(rows[-1]), flush=True)
    worst = max(r["max_s"] for r in rows)
    out = {"name": "impl_compile_cost", "device": f"CPU only ({platform.processor() or platform.machine()}, "
                                                   f"{os.cpu_count()} cores, shared): NVRTC compiles on the host",
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": "python bench/impl_compile_cost.py " + " ".join(sys.argv[1:]), "rows": rows,
           "targets": [{"target": f"the slowest compile within the caps, in or out of process, takes at most half "
                                  f"the compile time limit ({IMPL_COMPILE_TIMEOUT_S:.0f} s)",
                        "value_s": worst, "met": worst <= IMPL_COMPILE_TIMEOUT_S / 2}]}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["targets"]))


if __name__ == "__main__":
    main()
