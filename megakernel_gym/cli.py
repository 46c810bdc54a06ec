"""The `mkgym` command.

With --json, a command prints exactly one JSON value on stdout; logs go to stderr. The exit
code is non-zero only when the command itself could not run (a failed candidate is a result).
"""
from __future__ import annotations

import argparse
import json
import sys

EXIT_USAGE = 2


def _err(msg: str) -> int:
    print(f"mkgym: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _resolve_candidate(spec: str, problem_name: str):
    from megakernel_gym.curriculum import reference_candidates
    from megakernel_gym.rewards.problem import Candidate
    if spec in ("reference", "reference:triton", "reference:cuda"):
        kind = spec.partition(":")[2] or "triton"
        refs = reference_candidates(problem_name)
        if kind not in refs:
            raise FileNotFoundError(f"built-in problem {problem_name!r} ships no {kind} reference candidate "
                                    f"(has: {', '.join(refs) or 'none'})")
        return refs[kind]
    if spec == "-":
        return Candidate(sys.stdin.read(), "<stdin>")
    return Candidate.from_file(spec)


def _print_result(res) -> None:
    out = sys.stdout
    print(f"problem:   {res.problem}  ({res.backend}{', ' + res.device if res.device else ''})", file=out)
    print(f"status:    {res.status}" + (f" [{res.category}]" if res.category else ""), file=out)
    print(f"reason:    {res.reason}", file=out)
    if res.seeds:
        ok = sum(1 for s in res.seeds if s.get("ok"))
        print(f"seeds:     {ok}/{len(res.seeds)} correct", file=out)
    if res.timing:
        t = res.timing
        print(f"time:      {t['median_ms']:.4f} ms median over {t['samples']} calls "
              f"(p10 {t['p10_ms']:.4f}, p90 {t['p90_ms']:.4f})", file=out)
    for name, b in (res.baselines or {}).items():
        if isinstance(b, dict) and "median_ms" in b:
            sp = res.speedups.get(name)
            print(f"  {name:<14} {b['median_ms']:.4f} ms" + (f"   speedup {sp:.3f}x" if sp else ""), file=out)
        elif isinstance(b, dict):
            print(f"  {name:<14} unavailable: {b.get('error', '')[:100]}", file=out)
    if res.speedup is not None:
        print(f"speedup:   {res.speedup:.3f}x vs the best baseline", file=out)
    for f in res.flags:
        print(f"flag:      {f}", file=out)
    if res.compile_log:
        print("compiler:\n" + res.compile_log.rstrip(), file=out)


def cmd_judge(args) -> int:
    from megakernel_gym.curriculum import load_problem
    from megakernel_gym.rewards import CandidateError, GPUUnavailableError, Judge, ProblemError
    from megakernel_gym.rewards.reward_fns import gated_log_speedup
    try:
        problem = load_problem(args.problem)
        candidate = _resolve_candidate(args.candidate, problem.name)
    except (ProblemError, CandidateError, FileNotFoundError) as e:
        return _err(str(e))
    try:
        judge = Judge(backend=args.backend, store=False if args.no_store else args.store,
                      timeout_s=args.timeout, use_cache=not args.no_cache)
    except (ValueError, GPUUnavailableError) as e:
        return _err(str(e))
    try:
        print(f"judging {args.candidate} on {problem.name} ({judge.backend} backend)...", file=sys.stderr)
        res = judge.evaluate(problem, candidate)
    except ProblemError as e:
        return _err(str(e))
    finally:
        judge.close()
    if args.json:
        d = res.to_dict()
        d["reward"] = gated_log_speedup(res)
        print(json.dumps(d))
    else:
        _print_result(res)
        print(f"reward:    {gated_log_speedup(res):+.4f} (gated log-speedup)")
    return 0


def cmd_problems_list(args) -> int:
    from megakernel_gym.curriculum import builtin_names, get_problem, reference_candidates
    rows = []
    for name in builtin_names():
        p = get_problem(name)
        rows.append({"name": name, "level": p.level, "op_type": p.meta.get("OP_TYPE"),
                     "dtypes": p.meta.get("DTYPES"), "description": p.description,
                     "references": sorted(reference_candidates(name))})
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'name':<20} {'level':<6} {'references':<14} description")
        for r in rows:
            print(f"{r['name']:<20} {str(r['level']):<6} {','.join(r['references']):<14} {r['description']}")
    return 0


def cmd_compile(args) -> int:
    import torch

    from megakernel_gym.compiler import ZOO, capture, module_tensors, predict, run_graph, run_plan
    from megakernel_gym.compiler.costmodel import DEVICES
    from megakernel_gym.compiler.graph import UnsupportedOpError
    from megakernel_gym.compiler.validate import ScheduleError
    from megakernel_gym.ir_exposure import EditError, IRError, apply_edits, make_ir, render, render_op
    if args.model not in ZOO:
        return _err(f"unknown model {args.model!r}; zoo models: {', '.join(sorted(ZOO))}")
    if args.device not in DEVICES:
        return _err(f"unknown device {args.device!r} for the sim backend; known: {', '.join(DEVICES)}")
    big = not args.model.endswith("-tiny")
    if args.backend == "cpu" and big:
        return _err(f"--backend cpu runs the model tile by tile in the CPU VM; {args.model} is too large for that. "
                    "Use a -tiny model, or --backend sim for a predicted latency")
    edits = []
    if args.schedule:
        try:
            with open(args.schedule) as f:
                edits.append(f.read())
        except OSError as e:
            return _err(f"cannot read --schedule {args.schedule!r}: {e}")
    edits += args.edit or []
    print(f"capturing {args.model}...", file=sys.stderr)
    # shapes alone are enough to compile, emit and predict: big models stay on the meta device
    module, inputs = ZOO[args.model](device="meta") if args.backend != "cpu" else ZOO[args.model]()
    try:
        graph = capture(module, inputs, args.model)
        ir = make_ir(graph, num_sms=args.sms)
        for text in edits:
            ir = apply_edits(ir, text)
        plan = ir.plan()
    except (EditError, IRError, ScheduleError, UnsupportedOpError) as e:
        return _err(str(e))
    report: dict = {"model": args.model, "num_sms": args.sms, "ops": len(ir.ops), "tasks": len(plan.tg.tasks),
                    "counters": len(plan.counters)}
    if args.emit == "ir":
        report["ir"] = render(ir)
    elif args.emit == "tasks":
        ops = [args.op] if args.op else ir.ops
        unknown = [o for o in ops if o not in ir.ops]
        if unknown:
            return _err(f"no op {unknown[0]!r} in {args.model}; see `mkgym compile {args.model} --emit ir`")
        report["tasks_text"] = "\n\n".join(render_op(ir, o) for o in ops)
    if args.backend == "sim":
        p = predict(plan, args.device)
        report.update(backend="sim", device=args.device, predicted_us=round(p.latency_us, 2),
                      floor_us=round(p.floor_us, 2), efficiency=round(p.efficiency, 3))
    elif args.backend == "cpu":
        params = module_tensors(module)
        feeds = dict(zip(graph.inputs, inputs))
        with torch.no_grad():
            eager = module(*inputs)
        got = run_plan(plan, params, feeds, rng=0, adversarial=True)
        ref = run_graph(graph, params, feeds)
        out = graph.outputs[0]
        err_eager = float((got[out].double() - eager.double()).abs().max())
        err_graph = max(float((got[k].double() - v.double()).abs().max()) for k, v in ref.items())
        report.update(backend="cpu", max_abs_err_vs_eager=err_eager, max_abs_err_vs_graph=err_graph)
    if args.json:
        print(json.dumps(report))
        return 0
    if "ir" in report:
        print(report["ir"])
    if "tasks_text" in report:
        print(report["tasks_text"])
    summary = f"{args.model}: {report['ops']} ops, {report['tasks']} tasks on {args.sms} SMs, plan validated"
    if args.backend == "sim":
        summary += (f"; predicted {report['predicted_us']:.1f} us on {args.device} "
                    f"(floor {report['floor_us']:.1f} us, {100 * report['efficiency']:.0f}% of it)")
    elif args.backend == "cpu":
        summary += f"; CPU VM max abs error vs eager {report['max_abs_err_vs_eager']:.3g}"
    print(summary, file=sys.stderr if args.emit else sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mkgym", description="megakernel-gym: score GPU kernels, train policies")
    sub = ap.add_subparsers(dest="command", required=True)

    j = sub.add_parser("judge", help="score one candidate kernel for one problem")
    j.add_argument("problem", help="built-in problem name (see `mkgym problems list`) or path to a "
                                   "KernelBench-format .py file")
    j.add_argument("candidate", help="path to a .py file defining ModelNew, '-' for stdin, or "
                                     "'reference' / 'reference:cuda' for a built-in problem's shipped candidate")
    j.add_argument("--backend", default=None, help="cpu or gpu (default: gpu when a CUDA device is present)")
    j.add_argument("--json", action="store_true", help="print exactly one EvalResult JSON object on stdout")
    j.add_argument("--store", default=None, help="results database path (default: user cache dir; "
                                                 "or MKGYM_STORE)")
    j.add_argument("--no-store", action="store_true", help="do not read or write the results database")
    j.add_argument("--no-cache", action="store_true", help="evaluate again even if the store has a result")
    j.add_argument("--timeout", type=float, default=None, help="seconds per evaluation (default 180 cpu, 90 gpu)")
    j.set_defaults(func=cmd_judge)

    c = sub.add_parser("compile", help="compile a zoo model to a validated megakernel plan")
    c.add_argument("model", help="zoo model: llama-tiny, mlp-tiny, attention-tiny, llama-1b, mlp-1b, attention-1b")
    c.add_argument("--sms", type=int, default=132, help="SMs of the target GPU (default 132)")
    c.add_argument("--schedule", help="a file of edits (the edit language) applied before --edit")
    c.add_argument("--edit", action="append", help="edit text, e.g. 'tile lm_head n=64' (repeatable)")
    c.add_argument("--emit", choices=["ir", "tasks", "json"], default=None,
                   help="print the op-level IR, the task-level detail, or (with --json) everything")
    c.add_argument("--op", help="with --emit tasks: only this op")
    c.add_argument("--backend", choices=["cpu", "sim"], default=None,
                   help="cpu: run the plan in the CPU VM and compare with eager; sim: predicted latency")
    c.add_argument("--device", default="H200", help="GPU the sim backend predicts for (H100, H200)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_compile)

    p = sub.add_parser("problems", help="built-in problems")
    psub = p.add_subparsers(dest="problems_command", required=True)
    pl = psub.add_parser("list", help="list the built-in problems")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_problems_list)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
