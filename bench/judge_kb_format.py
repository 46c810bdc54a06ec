"""Time to reward for KernelBench-format CUDA candidates (`load_inline`), run on an H100/H200:

    python bench/judge_kb_format.py [--out DIR] [--n 8] [--raw 1] [--store PATH]
    python bench/judge_kb_format.py --identity [--out DIR] [--store PATH]
    python bench/judge_kb_format.py --mutants [--out DIR] [--store PATH]

Writes bench/results/judge_kb_format.json (device, date, command, rows, targets); with
--identity, judge_kb_identity.json, with --mutants judge_kb_identity_mutants.json instead. Side by side,
in one run, on the honest load_inline candidates of tests/corpus/honest_gpu/:

- raw: torch's own `load_inline` building the candidate's extension, as KernelBench's harness
  does (a fresh process; cold = an empty TORCH_EXTENSIONS_DIR, warm = the same one again), one at a
  time and `--n` at once;
- judge, one candidate at a time: the whole reward (static checks, the fast path's NVRTC compile and
  host interpreter, 6 seeds, timing, re-checks) on a warm judge whose problem baselines are already
  cached (the RL steady state). Cold = a source never compiled before (each run edits a comment in
  the CUDA text, so every cache misses); warm = the same source again, results cache off;
- judge, `--n` at once: a LocalPool (4 judges on the GPU) scoring `--n` new sources in one batch;
- with `--identity`: every honest load_inline candidate judged by the fast path and by the real
  load_inline (the judge's fast_inline=False), and their statuses compared;
- with `--mutants`: the same comparison on broken versions of the ReLU answer (a wrong value, an
  unwritten element, a compile error, a failing TORCH_CHECK, a launch of too many threads, an illegal
  address, a pointer of the wrong dtype), each also checked against the status its fault calls for.

Targets: <= 5 s cold, <= 1 s warm, 0 timeouts at --n at once, identical verdicts.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from judge_bench import spread, write  # noqa: E402

from megakernel_gym.rewards import Candidate, Judge, LocalPool, Problem  # noqa: E402

CORPUS = ROOT / "tests" / "corpus" / "honest_gpu"


def corpus(fmt: str = "load_inline") -> list[tuple[str, Problem, str]]:
    """(file name, problem, candidate code) for the honest GPU corpus entries of one format."""
    from conftest import problem_for, read_expectation
    out = []
    for path in sorted(CORPUS.glob("*")):
        if path.suffix not in (".py", ".md"):
            continue
        text = path.read_text()
        if not re.search(rf"^# format: {fmt}\b", text, re.M):
            continue
        exp = read_expectation(path)
        out.append((path.name, problem_for(exp), Candidate(text).source))
    return out


def variant(code: str, tag: str) -> str:
    """The same candidate with a comment line added to its CUDA text: every compile cache misses."""
    i = code.find("__global__")
    if i < 0:
        raise ValueError("no __global__ in the candidate")
    line = code.rfind("\n", 0, i) + 1
    return code[:line] + f"// variant {tag}\n" + code[line:]


RAW = r'''
import sys, time, json
import torch, torch.utils.cpp_extension as cpp
spent = [0.0]
real = cpp.load_inline
def timed(*a, **k):
    t = time.perf_counter()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.perf_counter() - t
cpp.load_inline = timed
prob, cand = json.load(open(sys.argv[1]))
t0 = time.perf_counter()
p = {"__name__": "problem"}
exec(compile(prob, "problem.py", "exec"), p)
for k, v in (p.get("GPU_SIZES") or {}).items():
    p[k] = v
c = {"__name__": "candidate"}
exec(compile(cand, "candidate.py", "exec"), c)
cls = c.get("ModelNew") or c["Model"]
m = cls(*p["get_init_inputs"]()).cuda()
print(json.dumps({"load_inline_s": spent[0], "total_s": time.perf_counter() - t0}))
'''


def raw_build(problem: Problem, code: str, ext_dir: str) -> dict:
    """torch's load_inline on this candidate in a fresh process (as KernelBench's harness builds it)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([problem.source, code], f)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": ext_dir}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", RAW, f.name], capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    os.unlink(f.name)
    if p.returncode != 0:
        return {"ok": False, "wall_s": wall, "error": p.stderr[-800:]}
    return {"ok": True, "wall_s": wall, **json.loads(p.stdout.strip().splitlines()[-1])}


def bench_raw(items, n_serial: int, n_parallel: int) -> list[dict]:
    rows = []
    for name, problem, code in items[:n_serial]:
        d = tempfile.mkdtemp(prefix="ext_")
        src = variant(code, f"raw-{time.time_ns()}")
        cold = raw_build(problem, src, d)
        warm = raw_build(problem, src, d)
        rows.append({"mode": "raw load_inline, one at a time", "candidate": name, "cold": cold, "warm": warm})
        print("raw", name, f"cold {cold['wall_s']:.1f}s warm {warm['wall_s']:.1f}s", flush=True)
    if n_parallel:
        from concurrent.futures import ThreadPoolExecutor
        picks = [items[i % len(items)] for i in range(n_parallel)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n_parallel) as ex:
            res = list(ex.map(lambda it: raw_build(it[1], variant(it[2], f"rawpar-{time.time_ns()}"),
                                                   tempfile.mkdtemp(prefix="ext_")), picks))
        wall = time.perf_counter() - t0
        secs = [r["wall_s"] for r in res]
        rows.append({"mode": f"raw load_inline, {n_parallel} at once", "candidates": [p[0] for p in picks],
                     "seconds": spread(secs), "batch_wall_s": wall, "failed": sum(not r["ok"] for r in res)})
        print(f"raw x{n_parallel}", f"median {statistics.median(secs):.1f}s wall {wall:.1f}s", flush=True)
    return rows


def bench_judge_serial(items, store: str) -> tuple[list[dict], list[float], list[float], int]:
    rows, colds, warms, wrong = [], [], [], 0
    with Judge(backend="gpu", store=store, use_cache=False) as judge:
        judge.warm()
        for name, problem, code in items:
            judge.baselines(problem)   # the problem is known: its baselines are cached, as in an RL run
            src = variant(code, f"cold-{time.time_ns()}")
            t0 = time.perf_counter()
            cold = judge.evaluate(problem, Candidate(src))
            c = time.perf_counter() - t0
            t0 = time.perf_counter()
            warm = judge.evaluate(problem, Candidate(src))
            w = time.perf_counter() - t0
            colds.append(c)
            warms.append(w)
            wrong += cold.status != "correct" or warm.status != "correct"
            rows.append({"mode": "judge, one at a time", "candidate": name, "problem": problem.name,
                         "cold_s": round(c, 3), "warm_s": round(w, 3), "status": cold.status,
                         "warm_status": warm.status, "reason": cold.reason[:300], "compile_paths": cold.compile_paths,
                         "phases": cold.phases, "warm_phases": warm.phases,
                         "speedup": cold.speedup, "candidate_ms": (cold.timing or {}).get("median_ms")})
            print("judge", name, cold.status, f"cold {c:.2f}s warm {w:.2f}s", cold.compile_paths,
                  cold.reason[:100], flush=True)
    return rows, colds, warms, wrong


def bench_judge_batch(items, n: int, store: str) -> tuple[dict, int, float]:
    picks = [items[i % len(items)] for i in range(n)]
    with LocalPool("gpu", store=store, use_cache=False) as pool:
        pool.warm()
        with Judge(backend="gpu", store=store, use_cache=False) as j0:
            for _, problem, _ in picks:
                j0.baselines(problem)
        jobs = [(problem, Candidate(variant(code, f"batch-{i}-{time.time_ns()}"))) for i, (_, problem, code)
                in enumerate(picks)]
        t0 = time.perf_counter()
        res = pool.evaluate_many(jobs)
        wall = time.perf_counter() - t0
    timeouts = sum(r.status == "timeout" for r in res)
    row = {"mode": f"judge, {n} at once (LocalPool, 4 judges on one GPU)", "candidates": [p[0] for p in picks],
           "seconds": spread([r.elapsed_s for r in res]), "batch_wall_s": round(wall, 2),
           "statuses": [r.status for r in res], "timeouts": timeouts,
           "reasons": [r.reason[:200] for r in res if r.status != "correct"]}
    print(f"judge x{n}", row["statuses"], f"wall {wall:.1f}s", flush=True)
    return row, timeouts, wall


# Broken versions of the plainest KernelBench answer (the ReLU fixture), one fault each, with the
# status both builds must agree on. (file name, old text, new text, expected status)
MUTANTS = [
    ("wrong_value", "v > 0.0f ? v : 0.0f;", "v > 0.0f ? v : 0.01f * v;", "incorrect"),
    ("last_element_unwritten", "if (idx < size) {", "if (idx < size - 1) {", "incorrect"),
    ("compile_error", "float v = x[idx];", "float v = x[idx]", "compile_error"),
    ("host_check_fails", "auto out = torch::empty_like(x);",
     'TORCH_CHECK(x.dim() == 3, "relu_cuda expects a 3-D tensor");\n    auto out = torch::empty_like(x);',
     "runtime_error"),
    ("launch_too_many_threads", "const int block_size = 256;", "const int block_size = 2048;", "runtime_error"),
    ("illegal_address", "out[idx] = v > 0.0f ? v : 0.0f;", "out[idx + (1 << 30)] = v > 0.0f ? v : 0.0f;",
     "runtime_error"),
    ("wrong_dtype_pointer", "x.data_ptr<float>()", "x.data_ptr<double>()", "compile_error"),
]


def mutants(items) -> list[tuple[str, Problem, str, str]]:
    """(name, problem, code, expected status) for each MUTANTS fault applied to the ReLU fixture."""
    base = next((it for it in items if it[0] == "l1_relu_fixture_inline.py"), None)
    if base is None:
        raise SystemExit("--mutants needs tests/corpus/honest_gpu/l1_relu_fixture_inline.py")
    out = []
    for name, old, new, expect in MUTANTS:
        if old not in base[2]:
            raise SystemExit(f"mutant {name}: {old!r} is not in the ReLU fixture")
        out.append((f"mutant:{name}", base[1], base[2].replace(old, new, 1), expect))
    return out


def bench_identity(items, store: str) -> tuple[dict, int]:
    """Each load_inline candidate through the fast path and through torch's own build."""
    with LocalPool("gpu", store=store, use_cache=False, slots_per_gpu=8, fast_inline=False,
                   compile_timeout_s=900) as real:
        slow = real.evaluate_many([(it[1], Candidate(it[2])) for it in items])
    with LocalPool("gpu", store=store, use_cache=False) as fast:
        quick = fast.evaluate_many([(it[1], Candidate(it[2])) for it in items])
    pairs = [{"candidate": it[0], "fast": a.status, "real": b.status, "fast_paths": a.compile_paths,
              "fast_reason": a.reason[:200], "real_reason": b.reason[:200], "expected": it[3] if len(it) > 3 else None}
             for it, a, b in zip(items, quick, slow)]
    differ = sum(p["fast"] != p["real"] for p in pairs)
    print("identity:", [(p["candidate"], p["fast"], p["real"]) for p in pairs], flush=True)
    return {"mode": "verdicts: fast path vs torch's load_inline", "pairs": pairs, "differ": differ}, differ


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--n", type=int, default=8, help="candidates at once")
    ap.add_argument("--raw", type=int, default=1, help="candidates built by raw load_inline one at a time")
    ap.add_argument("--identity", action="store_true", help="compare fast-path and real verdicts (alone)")
    ap.add_argument("--mutants", action="store_true",
                    help="compare fast-path and real verdicts on broken candidates (alone)")
    ap.add_argument("--store", default=None, help="results store to share (its cached baselines save minutes)")
    ap.add_argument("--only", default="", help="comma-separated corpus file names (default: all)")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench/judge_kb_format.py needs a CUDA GPU (run it on the device)")
    items = corpus()
    if args.only:
        items = [it for it in items if it[0] in args.only.split(",")]
    store = args.store or str(Path(tempfile.mkdtemp()) / "store.sqlite")
    rows, targets = [], []
    if args.mutants:
        muts = mutants(items)
        row, differ = bench_identity(muts, store)
        unexpected = [p["candidate"] for p in row["pairs"] if p["fast"] != p["expected"]]
        write("kb_identity_mutants", [row], [
            {"target": "fast path verdicts identical to torch's load_inline on broken candidates",
             "measured": f"{len(muts) - differ}/{len(muts)} identical", "met": differ == 0},
            {"target": "each broken candidate gets the status its fault calls for",
             "measured": f"{len(muts) - len(unexpected)}/{len(muts)}", "unexpected": unexpected,
             "met": not unexpected}], args.out,
              notes="the ReLU fixture answer with one fault each (bench/judge_kb_format.py MUTANTS)")
        return
    if args.identity:
        row, differ = bench_identity(items, store)
        write("kb_identity", [row], [{"target": "fast path verdicts identical to torch's load_inline",
                                      "measured": f"{len(items) - differ}/{len(items)} identical",
                                      "met": differ == 0}], args.out,
              notes=f"{len(items)} honest load_inline candidates from tests/corpus/honest_gpu")
        return
    jrows, colds, warms, wrong = bench_judge_serial(items, store)
    rows += jrows
    batch, timeouts, _ = bench_judge_batch(items, args.n, store)
    rows.append(batch)
    rows += bench_raw(items, args.raw, args.n)
    cold_med, warm_med = statistics.median(colds), statistics.median(warms)
    raw_cold = [r["cold"]["wall_s"] for r in rows if r.get("mode", "").startswith("raw load_inline, one")]
    rows.append({"mode": "summary", "judge_cold_s": spread(colds), "judge_warm_s": spread(warms),
                 "raw_load_inline_cold_s": spread(raw_cold) if raw_cold else None,
                 "raw_cold_over_judge_cold": round(statistics.median(raw_cold) / cold_med, 1) if raw_cold else None})
    targets += [{"target": "judge time to reward, cold source, one at a time: median <= 5 s",
                 "measured": round(cold_med, 3), "max": round(max(colds), 3), "met": cold_med <= 5},
                {"target": "judge time to reward, same source again: median <= 1 s",
                 "measured": round(warm_med, 3), "max": round(max(warms), 3), "met": warm_med <= 1},
                {"target": f"0 timeouts with {args.n} at once", "measured": timeouts, "met": timeouts == 0},
                {"target": "every honest candidate correct", "measured": f"{len(items) - wrong}/{len(items)}",
                 "met": wrong == 0}]
    write("kb_format", rows, targets, args.out, notes=f"{len(items)} honest load_inline candidates from "
          "tests/corpus/honest_gpu; baselines cached before timing (a known problem)")


if __name__ == "__main__":
    main()
