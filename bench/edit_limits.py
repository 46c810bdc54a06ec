"""What one edit action costs at worst (issue 39 item 5), and the numbers behind the caps:
compiler/tasks.py MAX_DEPENDENCIES (and its byte-bounded caches), ir_exposure/edits.py's linear
op patterns, ASCII-only numbers and MAX_IMPL_OPS.

    python bench/edit_limits.py [--out bench/results/edit_limits.json] [--before-tree DIR] [--skip-zoo]

- red team: the actions a red team wrote against the edit language, each as one env step
  (MegaKernelEnv, sim backend) on the 1B-shaped decoder (mk_llama_decode, 275 ops), each in a
  process of its own: CPU and wall seconds, the process's peak RSS, what the step answered.
  With --before-tree (a checkout of an older commit, e.g. `git worktree add /tmp/before 92e0ae9`)
  the same steps run against that code too, each under a 240 s limit.
- memory: eight steps of near-cap plans (a layer's silu_mul at n=1 and down_proj at n=4, 4.5M
  dependencies, moved to the next layer each step), then ten counter-mode variants of one plan: RSS
  after each, in one process (and against --before-tree's code).
- zoo: every level-5 problem's default, tuned and expert plans: tasks, dependencies, and what
  the dependency cap counts (overlapping span pairs, and the bound on task pairs it caps): the
  margin under MAX_DEPENDENCIES.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

STEP = r"""
import json, resource, sys, time
from megakernel_gym.env.megakernel import MegaKernelEnv
name, text = json.load(sys.stdin)
env = MegaKernelEnv(backend="sim")
env.reset(seed=0, options={"problem": "mk_llama_decode"})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
c, w = time.process_time(), time.perf_counter()
obs, reward, term, trunc, info = env.step(text)
print(json.dumps({"case": name, "cpu_s": round(time.process_time() - c, 3), "wall_s": round(time.perf_counter() - w, 3),
                  "peak_rss_gb_before": round(before, 3), "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3),
                  "status": info["eval"]["status"], "answer": info["eval"]["reason"][:300]}))
"""

MEMORY = r"""
import json, os, resource, time
from megakernel_gym.env.megakernel import MegaKernelEnv
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 30
env = MegaKernelEnv(backend="sim")
env.reset(seed=0, options={"problem": "mk_llama_decode"})
rows = [{"step": "reset", "rss_gb": round(rss(), 3)}]
steps = []
for k in range(8):
    text = f"tile layers.{k}.mlp.silu_mul n=1\ntile layers.{k}.mlp.down_proj n=4"
    if k:
        text = f"tile layers.{k-1}.mlp.silu_mul n=64\ntile layers.{k-1}.mlp.down_proj n=16\n" + text
    steps.append((f"near-cap plan, layer {k}", text))
steps += [(f"counter mode variant {k}", f"counter layers.{k}.mlp.up_proj op") for k in range(10)]
for name, text in steps:
    c = time.process_time()
    obs, reward, term, trunc, info = env.step(text)
    rows.append({"step": name, "cpu_s": round(time.process_time() - c, 3), "rss_gb": round(rss(), 3),
                 "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3),
                 "status": info["eval"]["status"]})
print(json.dumps(rows))
"""

ZOO = r"""
import json, sys
from megakernel_gym.compiler import tasks as T
from megakernel_gym.curriculum.suite import builtin_suite
from megakernel_gym.env.megakernel import _Megakernel
from megakernel_gym.ir_exposure import apply_edits, tuned_edits
from megakernel_gym.policies.expert import expert_edits
counted = []
check = T._check_dependency_count
def spy(jobs, limit):
    spans = bound = 0
    for low, _, key, q, other, _, found in jobs:
        s, b = T._overlap_bound(q, found)
        spans, bound = spans + s, bound + b
    counted.append((spans, bound))
    return check(jobs, limit)
T._check_dependency_count = spy
name = sys.argv[1]
mk = _Megakernel(builtin_suite().get(name), "sim", 132, "H200")
rows = []
for label, text in (("default", ""), ("tuned", tuned_edits(mk.ir0)), ("expert", expert_edits(mk.ir0))):
    ir = apply_edits(mk.ir0, text)
    T._LOWERED.clear()
    for c in T._OP_CACHES.values():
        c.ops.clear()
    counted.clear()
    tg = T.lower_cached(ir.graph, ir.knobs.tiles, ir.knobs.num_sms, ir.fused, ir.knobs.splits)
    rows.append({"problem": name, "ops": len(ir.facts.ops), "schedule": label, "tasks": len(tg.tasks),
                 "dependencies": int(len(T.dep_edges(tg)[0])), "span_pairs": counted[-1][0],
                 "capped_count": counted[-1][1]})
print(json.dumps(rows))
"""

LEGAL = ("honest", "within", "just under")    # cases that must be accepted: their cost is the plan's
TIMED_THRICE = LEGAL[1:]                       # the near-cap ones, each in three fresh processes
RED_TEAM = [
    ("14 stars: tile **************Q n=64", "tile " + "*" * 14 + "Q n=64"),
    ("200 stars: tile ***...Q n=64", "tile " + "*" * 200 + "Q n=64"),
    ("impl * <<<20k characters>>>", "impl * <<<" + "{ float v = (float)lo; v = v * 2.0f + 1.0f; if (v < -1e30f) out[0] = v; }\n"
     * (19990 // 76) + ">>>"),
    ("silu_mul and down_proj at n=1 on four layers",
     "\n".join(f"tile layers.{k}.mlp.silu_mul n=1\ntile layers.{k}.mlp.down_proj n=1" for k in range(4))),
    ("sms=٠-٩ (Arabic-Indic digits)", "assign layers.0.mlp.add sms=٠-٩"),
    ("honest: tile layers.*.mlp.down_proj n=64", "tile layers.*.mlp.down_proj n=64"),
    ("honest: tile layers.{0..3}.mlp.down_proj n=64", "tile layers.{0..3}.mlp.down_proj n=64"),
    ("within the cap: a layer's silu_mul n=1, down_proj n=4 (4.5M dependencies)",
     "tile layers.0.mlp.silu_mul n=1\ntile layers.0.mlp.down_proj n=4"),
    ("just under the cap: that and layer 1's silu_mul n=8, down_proj n=8 (4.75M of 5M dependencies)",
     "tile layers.0.mlp.silu_mul n=1\ntile layers.0.mlp.down_proj n=4\n"
     "tile layers.1.mlp.silu_mul n=8\ntile layers.1.mlp.down_proj n=8"),
    ("within the task cap: every layer's gate/up at n=8 and down at n=4 (under 65,536 tasks)",
     "tile layers.*.mlp.gate_proj n=8\ntile layers.*.mlp.up_proj n=8\ntile layers.*.mlp.down_proj n=4"),
]


def run(code: str, stdin: str = "", tree: str | None = None, timeout: int = 900, args: tuple = ()) -> tuple[str, str]:
    env = dict(os.environ, PYTHONPATH=tree or ROOT)
    try:
        r = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=tree or ROOT)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {timeout} s"
    return r.stdout, r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/edit_limits.json"))
    ap.add_argument("--before-tree", default=None, help="a checkout of the code to compare with")
    ap.add_argument("--skip-zoo", action="store_true")
    args = ap.parse_args()
    from megakernel_gym.compiler.tasks import MAX_DEPENDENCIES, SPAN_PAIRS_PER_DEPENDENCY
    rows = []
    trees = [("after", None)] + ([("before", os.path.abspath(args.before_tree))] if args.before_tree else [])
    for name, text in RED_TEAM:
        for label, tree in trees:
            # legal work, whose cost is the plan's, runs in three fresh processes (a first process on a
            # shared VM pays for its page faults now and then): the row keeps the median and each run's
            reps = 3 if name.startswith(TIMED_THRICE) and label == "after" else 1
            got = []
            for _ in range(reps):
                out, err = run(STEP, json.dumps([name, text]), tree, timeout=240 if label == "before" else 900)
                got.append(json.loads(out.splitlines()[-1]) if out.strip() else {"case": name, "error": err[-300:]})
            row = sorted(got, key=lambda r: r.get("cpu_s", 1e9))[len(got) // 2]
            if reps > 1:
                row = dict(row, cpu_s_runs=[r.get("cpu_s") for r in got])
            rows.append({"section": "red team", "code": label, **row})
            print(json.dumps(rows[-1])[:300], file=sys.stderr, flush=True)
    for label, tree in trees:
        out, err = run(MEMORY, tree=tree, timeout=1800)
        rows += [{"section": "memory", "code": label, **r}
                 for r in (json.loads(out) if out.strip() else [{"error": err[-300:]}])]
    if not args.skip_zoo:
        from megakernel_gym.curriculum.suite import builtin_suite
        for p in builtin_suite():
            if p.meta.get("KIND") == "megakernel":
                out, err = run(ZOO, args=(p.name,))
                rows += [{"section": "zoo", **r} for r in (json.loads(out) if out.strip() else
                                                           [{"problem": p.name, "error": err[-300:]}])]
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    after = [r for r in rows if r.get("section") == "red team" and r.get("code") == "after"]
    zoo = [r for r in rows if r.get("section") == "zoo" and "capped_count" in r]
    memory = [r for r in rows if r.get("section") == "memory" and r.get("code") == "after" and "rss_gb" in r]
    adversarial = [r for r in after if not r["case"].startswith(LEGAL)]
    legal = [r for r in after if r["case"].startswith(LEGAL)]
    targets = [
        {"target": "every red-team action answered in at most 1 s of CPU on the 1B decoder",
         "value_s": max((r.get("cpu_s", 1e9) for r in adversarial), default=None),
         "met": all(r.get("cpu_s", 1e9) <= 1.0 for r in adversarial)},
        {"target": "every action within the caps (the honest ones, a plan just under the dependency cap, one just "
                   "under the task cap) answered in at most 1 s of CPU on the 1B decoder (issue 39, item 5; the "
                   "median of three fresh processes for the last two, each run's in cpu_s_runs)",
         "value_s": max((r.get("cpu_s", 1e9) for r in legal), default=None),
         # every single timed step of legal work, the memory run's included (a process's second near-cap
         # step pays for its memory growing): what the medians smooth over
         "slowest_single_step_s": max([c for r in legal for c in (r.get("cpu_s_runs") or [r.get("cpu_s", 1e9)])]
                                      + [r["cpu_s"] for r in memory if "cpu_s" in r], default=None),
         "met": all(r.get("cpu_s", 1e9) <= 1.0 for r in legal)},
        {"target": "every zoo plan's capped count at most half of MAX_DEPENDENCIES "
                   f"({MAX_DEPENDENCIES:,}), its span pairs at most half of their cap "
                   f"({SPAN_PAIRS_PER_DEPENDENCY * MAX_DEPENDENCIES:,}): room for a policy to tile past the expert",
         "value": max((r["capped_count"] for r in zoo), default=None),
         "value_span_pairs": max((r["span_pairs"] for r in zoo), default=None),
         "met": bool(zoo) and all(2 * r["capped_count"] <= MAX_DEPENDENCIES
                                  and 2 * r["span_pairs"] <= SPAN_PAIRS_PER_DEPENDENCY * MAX_DEPENDENCIES for r in zoo)},
        {"target": "RSS stays within 1 GB of the reset's over 18 steps of near-cap plans and their variants",
         "value_gb": round(max(r["rss_gb"] for r in memory) - memory[0]["rss_gb"], 3) if memory else None,
         "met": bool(memory) and max(r["rss_gb"] for r in memory) - memory[0]["rss_gb"] <= 1.0},
    ]
    commit = lambda tree: subprocess.run(["git", "-C", tree or ROOT, "rev-parse", "--short", "HEAD"],  # noqa: E731
                                         capture_output=True, text=True).stdout.strip()
    result = {"name": "edit_limits", "device": f"CPU only ({platform.machine()}, {os.cpu_count()} cores, shared)",
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/edit_limits.py " + " ".join(sys.argv[1:]),
              "code": {label: commit(tree) + ("" if tree else " + working tree") for label, tree in trees},
              "rows": rows, "targets": targets}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(json.dumps(targets))


if __name__ == "__main__":
    main()
