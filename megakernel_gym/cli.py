"""The `mkgym` command.

With --json, a command prints exactly one JSON value on stdout; logs go to stderr. The exit
code is non-zero only when the command itself could not run (a failed candidate is a result).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

EXIT_USAGE = 2
_json_errors = False     # --json on the command line: a failure is one JSON object on stdout too


def _err(msg: str) -> int:
    print(f"mkgym: error: {msg}", file=sys.stderr)
    if _json_errors:
        print(json.dumps({"error": msg, "exit_code": EXIT_USAGE}))
    return EXIT_USAGE


def _did_you_mean(name: str, known) -> str:
    import difflib
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are also one JSON object on stdout under --json."""

    def error(self, message: str):
        if _json_errors:
            print(json.dumps({"error": f"{self.prog}: {message}", "exit_code": EXIT_USAGE}))
        super().error(message)


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


def _judge_on_server(args, problem, candidate):
    """The EvalResult from the user's judge server for this backend and store (started on first use:
    rewards/judge_server.py), or an exit code."""
    from megakernel_gym.rewards import judge_server
    from megakernel_gym.rewards.judge import GPUUnavailableError, check_timeout, resolve_backend
    from megakernel_gym.rewards.problem import ProblemError
    from megakernel_gym.rewards.store import default_path
    try:
        backend = resolve_backend(args.backend)
        check_timeout(args.timeout)
        judge_server.idle_seconds()
    except (ValueError, GPUUnavailableError) as e:
        return _err(str(e))
    store = None if args.no_store else str(Path(args.store).resolve() if args.store else default_path().resolve())
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    print(f"judging {args.candidate} on {problem.name} ({backend} backend)...", file=sys.stderr)
    try:
        res = judge_server.evaluate(problem, candidate, backend, store, timeout_s=args.timeout,
                                    use_cache=not args.no_cache, log=log)
        if res.category == "problem":
            raise ProblemError(res.reason)
    except ProblemError as e:
        return _err(str(e))
    except judge_server.JudgeServerError as e:
        # the server is a convenience: where none can be used, the command still judges, as it did before
        print(f"mkgym: the judge server could not judge it ({e}); judging in this process instead "
              "(--no-server skips the server)", file=sys.stderr)
        return _judge_here(args, problem, candidate)
    return res


def _judge_here(args, problem, candidate):
    """The EvalResult of a judge in this process (or a Ray actor), closed afterwards, or an exit code."""
    from megakernel_gym.rewards import GPUUnavailableError, Judge, ProblemError, RayPool, RayPoolError
    store = False if args.no_store else args.store
    try:
        if args.pool == "ray":   # one judge in an actor on the cluster: the same result, judged there
            judge = RayPool(args.backend, num_workers=1, slots_per_gpu=1, store=store, address=args.ray_address,
                            timeout_s=args.timeout, use_cache=not args.no_cache)
        else:
            judge = Judge(backend=args.backend, store=store, timeout_s=args.timeout, use_cache=not args.no_cache)
    except (ValueError, GPUUnavailableError, RayPoolError) as e:
        return _err(str(e))
    try:
        print(f"judging {args.candidate} on {problem.name} ({judge.backend} backend)...", file=sys.stderr)
        res = judge.evaluate(problem, candidate)
        if res.category == "problem":   # a pool reports a broken problem as a result; here it is an input error
            raise ProblemError(res.reason)
    except ProblemError as e:
        return _err(str(e))
    finally:
        judge.close()
    return res


def cmd_judge(args) -> int:
    from megakernel_gym.curriculum import load_problem
    from megakernel_gym.rewards.problem import CandidateError, ProblemError
    from megakernel_gym.rewards.reward_fns import gated_log_speedup
    try:
        problem = load_problem(args.problem)
        if args.tolerance:
            problem = dataclasses.replace(problem, tolerance=args.tolerance)
        candidate = _resolve_candidate(args.candidate, problem.name)
    except (ProblemError, CandidateError, FileNotFoundError) as e:
        return _err(str(e))
    if args.pool == "local" and not args.no_server and os.environ.get("MKGYM_JUDGE_SERVER", "1") != "0":
        res = _judge_on_server(args, problem, candidate)
    else:
        res = _judge_here(args, problem, candidate)
    if isinstance(res, int):
        return res
    if args.json:
        d = res.to_dict()
        d["reward"] = gated_log_speedup(res)
        print(json.dumps(d))
    else:
        _print_result(res)
        print(f"reward:    {gated_log_speedup(res):+.4f} (gated log-speedup)")
    return 0


def cmd_judge_server(args) -> int:
    from megakernel_gym.rewards import judge_server
    try:
        rows = judge_server.servers() if args.action == "list" else judge_server.stop_all()
    except judge_server.JudgeServerError as e:
        return _err(str(e))
    if args.json:
        print(json.dumps(rows))
    elif args.action == "list":
        for r in rows:
            state = (f"pid {r['pid']}, {r['backend']} backend on {r['device'] or '?'}, {r['served']} judged, "
                     f"store {r['store']}") if r["running"] else "not answering (stale)"
            print(f"{r['socket']}: {state}")
        if not rows:
            print("no judge servers running")
    else:
        print(f"stopped {len(rows)} judge server(s)")
    return 0


def cmd_serve(args) -> int:
    from megakernel_gym.curriculum import get_problem
    from megakernel_gym.rewards import GPUUnavailableError, RayPoolError, make_pool
    try:
        from megakernel_gym.rewards.serve import require, serve
        require()
        pool = make_pool(args.pool, args.backend, num_workers=args.workers, store=args.store, address=args.ray_address)
    except (ImportError, ValueError, GPUUnavailableError, RayPoolError) as e:
        return _err(str(e))
    try:
        pool.warm()
        print(f"serving the judge ({args.pool} pool, {pool.backend} backend, {pool.size} judge(s)) on "
              f"http://{args.host}:{args.port}: POST /evaluate, GET /health", file=sys.stderr, flush=True)
        serve(pool, args.host, args.port, resolve_problem=get_problem, timeout_s=args.timeout,
              max_request_bytes=int(args.max_request_mb * (1 << 20)), allow_problem_source=args.allow_problem_source)
    except RayPoolError as e:
        return _err(str(e))
    finally:
        pool.close()
    return 0


def _suite(args):
    from megakernel_gym.curriculum import load_suite
    suite = load_suite(args.suite)
    for e in suite.errors:
        print(f"mkgym: warning: skipped {e}", file=sys.stderr)
    return suite


def cmd_problems_list(args) -> int:
    from megakernel_gym.curriculum import SuiteError, reference_candidates
    try:
        suite = _suite(args)
        rows = suite.filter(level=args.level, split=args.split, tags=args.tag or ()).rows()
    except SuiteError as e:
        return _err(str(e))
    builtin = args.suite in (None, "builtin")
    for r in rows:
        r["references"] = sorted(reference_candidates(r["name"])) if builtin else []
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'name':<28} {'level':<5} {'split':<8} {'dtypes':<18} description")
    for r in rows:
        dt = ",".join(r["dtypes"] or [])
        desc = r["description"] or ""
        print(f"{r['name']:<28} {str(r['level']):<5} {r['split']:<8} {dt:<18} "
              f"{desc[:90] + ('...' if len(desc) > 90 else '')}")
    levels = sorted({r["level"] for r in rows if r["level"] is not None})
    counts = ", ".join(f"L{lv}: {sum(r['level'] == lv for r in rows)}" for lv in levels)
    print(f"{len(rows)} problems ({counts})", file=sys.stderr)
    return 0


def cmd_problems_show(args) -> int:
    from megakernel_gym.curriculum import SuiteError, reference_candidates, split_of
    from megakernel_gym.rewards import ProblemError
    try:
        problem = _suite(args).get(args.name) if args.suite not in (None, "builtin") else None
        if problem is None:
            from megakernel_gym.curriculum import load_problem
            problem = load_problem(args.name)
    except (SuiteError, ProblemError) as e:
        return _err(str(e))
    info = {"name": problem.name, "level": problem.level, "split": split_of(problem),
            "path": problem.path, "sha256": problem.sha256,
            "meta": {k: v for k, v in problem.meta.items()}, "baselines": problem.baselines,
            "references": sorted(reference_candidates(problem.name)) if problem.path and "/curriculum/" in
            problem.path else [], "source": problem.source}
    if args.json:
        print(json.dumps(info, default=str))
        return 0
    print(f"{problem.name}  (level {problem.level}, {info['split']})  {problem.path or ''}")
    for k, v in info["meta"].items():
        if k != "DESCRIPTION":
            print(f"  {k:<17} {v}")
    if problem.description:
        print(f"\n{problem.description}")
    if info["references"]:
        print(f"\nreference candidates: {', '.join(info['references'])} "
              f"(mkgym judge {problem.name} reference{':cuda' if info['references'] == ['cuda'] else ''})")
    print("\n" + problem.source.rstrip())
    return 0


def cmd_problems_check(args) -> int:
    from megakernel_gym.curriculum import SuiteError, Suite, builtin_suite, load_problem, load_suite
    from megakernel_gym.curriculum.check import check_problems
    from megakernel_gym.rewards import GPUUnavailableError, ProblemError
    from megakernel_gym.rewards.judge import resolve_backend
    try:
        backend = resolve_backend(args.backend)
        if not args.targets:
            suite, strict = builtin_suite(), True
        else:
            problems, errors = [], []
            builtin = builtin_suite()
            for t in args.targets:
                if t in builtin:
                    problems.append(builtin.get(t))
                elif Path(t).is_dir():
                    s = load_suite(t)
                    problems += list(s)
                    errors += s.errors
                else:
                    problems.append(load_problem(t))
            suite, strict = Suite(problems, errors, "selection"), all(t in builtin for t in args.targets)
        if args.level is not None:
            suite = suite.filter(level=args.level)
    except (SuiteError, ProblemError, ValueError, GPUUnavailableError) as e:
        return _err(str(e))
    print(f"checking {len(suite)} problem(s) on the {backend} backend...", file=sys.stderr)
    reports = check_problems(suite, backend=backend, strict=args.strict or strict, progress=not args.json)
    failed = [r for r in reports if not r.ok]
    out = {"backend": backend, "problems": len(reports), "passed": len(reports) - len(failed),
           "refused": [r.problem for r in failed], "load_errors": [str(e) for e in suite.errors],
           "reports": [r.to_dict() for r in reports]}
    if args.out:
        import datetime
        import platform
        out.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   command="mkgym " + " ".join(sys.argv[1:]), host=platform.node())
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    if args.json:
        print(json.dumps(out))
    else:
        for r in reports:
            print(r.summary())
        for e in suite.errors:
            print(f"REFUSED {e}")
        print(f"{out['passed']}/{len(reports)} passed" + (f"; {len(suite.errors)} file(s) did not load"
                                                            if suite.errors else ""))
    return 1 if failed or suite.errors else 0


def cmd_curriculum_show(args) -> int:
    from megakernel_gym.curriculum.curriculum import Curriculum, CurriculumError
    from megakernel_gym.curriculum import SuiteError
    try:
        cur = Curriculum.load(args.state, args.config) if args.state else Curriculum(args.config)
    except (CurriculumError, SuiteError) as e:
        return _err(str(e))
    info = cur.summary()
    if args.json:
        info["metrics"] = cur.metrics()
        print(json.dumps(info))
        return 0
    print(f"curriculum {info['config']} over {info['suite']}: level {info['level']}, "
          f"{info['episodes']} training episodes, {len(info['promotions'])} promotion(s)")
    print(f"  {'level':<6} {'turns':<6} {'train':<6} {'held':<6} {'held-out seen':<14} promotion rule")
    for r in info["levels"]:
        seen = f"{r['heldout_seen']}" + (f" ({r['heldout_pass_rate']:.0%})" if r["heldout_pass_rate"] is not None
                                         else "")
        mark = "*" if r["current"] else " "
        note = "  (no held-out problems: judged on train)" if r["heldout_is_train"] else ""
        print(f"{mark} {r['level']:<6} {r['turns']:<6} {r['train']:<6} {r['heldout']:<6} {seen:<14} {r['rule']}{note}")
    for p in info["promotions"]:
        print(f"  promoted {p['from']} -> {p['to']} after {p['episode']} episodes")
    return 0


def cmd_compile(args) -> int:
    import torch

    from megakernel_gym.compiler import ZOO, capture, module_tensors, predict, run_graph, run_plan
    from megakernel_gym.compiler.costmodel import DEVICES
    from megakernel_gym.compiler.graph import UnsupportedOpError
    from megakernel_gym.compiler.validate import ScheduleError
    from megakernel_gym.ir_exposure import EditError, IRError, apply_edits, make_ir, render, render_op, tuned_edits
    if args.model not in ZOO:
        return _err(f"unknown model {args.model!r}{_did_you_mean(args.model, ZOO)}; zoo models: {', '.join(sorted(ZOO))}")
    if args.device not in DEVICES:
        return _err(f"unknown device {args.device!r} for the sim backend; known: {', '.join(DEVICES)}")
    big = not args.model.endswith("-tiny")
    if args.backend == "gpu":
        if not torch.cuda.is_available():
            return _err("--backend gpu runs the megakernel on a CUDA GPU, and none is visible; use --backend sim "
                        "for a predicted latency")
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
    module, inputs = (ZOO[args.model](device="meta") if args.backend not in ("cpu", "gpu") else
                      ZOO[args.model](device="cuda" if args.backend == "gpu" else None))
    try:
        graph = capture(module, inputs, args.model)
        ir = ir0 = make_ir(graph, num_sms=args.sms)
        if args.expert:
            from megakernel_gym.policies.expert import expert_edits
            ir = apply_edits(ir, expert_edits(ir))
        elif args.tuned:
            ir = apply_edits(ir, tuned_edits(ir))
        for text in edits:
            ir = apply_edits(ir, text)
        plan = ir.plan()
    except (EditError, IRError, ScheduleError, UnsupportedOpError) as e:
        return _err(str(e))
    report: dict = {"model": args.model, "num_sms": args.sms, "ops": len(ir.ops), "tasks": len(plan.tg.tasks),
                    "counters": len(plan.counters)}
    if args.emit == "ir":
        report["ir"] = render(ir)
    elif args.emit == "cuda":
        from megakernel_gym.compiler.codegen import CodegenError, emit_cuda
        try:
            report["cuda"] = emit_cuda(plan, impls=ir.impls)[0]
        except CodegenError as e:
            return _err(str(e))
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
        if ir.text != ir0.text:     # edited: what the edits did, against the compiler's default
            d = predict(ir0.plan(), args.device).latency_us
            report.update(default_predicted_us=round(d, 2), speedup_over_default=round(d / p.latency_us, 4))
    elif args.backend == "gpu":
        from megakernel_gym.compiler.codegen import CodegenError
        from megakernel_gym.compiler.runtime import Megakernel, MegakernelError, copy_bandwidth_gbs, time_us
        from megakernel_gym.cuda.nvrtc import CudaCompileError
        try:
            launch = Megakernel(plan, impls=ir.impls).bind(module_tensors(module), dict(zip(graph.inputs, inputs)))
            launch()
            launch.check()
            got = launch.outputs()[graph.outputs[0]].float()
            with torch.no_grad():
                eager = module(*inputs).float()
            t = time_us(launch, 30)
        except (CodegenError, MegakernelError) as e:
            return _err(str(e))
        except CudaCompileError as e:
            return _err(f"the megakernel does not compile (an impl body?):\n{str(e)[-3000:]}")
        report["rel_err_vs_eager"] = float((got - eager).norm() / eager.norm())
        weight_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
        floor_us = weight_bytes / (copy_bandwidth_gbs() * 1e9) * 1e6
        report.update(backend="gpu", device=torch.cuda.get_device_name(0), measured_us=round(t["median_us"], 2),
                      p10_us=round(t["p10_us"], 2), p90_us=round(t["p90_us"], 2), floor_us=round(floor_us, 2),
                      floor_share=round(floor_us / t["median_us"], 3))
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
    if "cuda" in report:
        print(report["cuda"])
    if "tasks_text" in report:
        print(report["tasks_text"])
    summary = f"{args.model}: {report['ops']} ops, {report['tasks']} tasks on {args.sms} SMs, plan validated"
    if args.backend == "sim":
        summary += (f"; predicted {report['predicted_us']:.1f} us on {args.device} "
                    f"(floor {report['floor_us']:.1f} us, {100 * report['efficiency']:.0f}% of it)")
        if "default_predicted_us" in report:
            summary += (f"; the default schedule {report['default_predicted_us']:.1f} us: "
                        f"{report['speedup_over_default']:.3f}x")
    elif args.backend == "cpu":
        summary += f"; CPU VM max abs error vs eager {report['max_abs_err_vs_eager']:.3g}"
    elif args.backend == "gpu":
        summary += (f"; measured {report['measured_us']:.1f} us on {report['device']} (p10 {report['p10_us']:.1f}, "
                    f"p90 {report['p90_us']:.1f}); bandwidth floor {report['floor_us']:.1f} us, "
                    f"{100 * report['floor_share']:.0f}% of it; relative L2 error vs eager "
                    f"{report['rel_err_vs_eager']:.2e}")
    print(summary, file=sys.stderr if args.emit else sys.stdout)
    return 0


def cmd_demo(args) -> int:
    from megakernel_gym.env.demo import run_demo
    from megakernel_gym.rewards import ProblemError
    try:
        summary = run_demo(args.problem, args.backend, args.out, log=sys.stderr if args.json else sys.stdout)
    except (ProblemError, ValueError) as e:
        return _err(str(e))
    if args.json:
        print(json.dumps(summary))
    return 0


def cmd_eval(args) -> int:
    from megakernel_gym.policies import POLICIES, evaluate_policy, format_board
    from megakernel_gym.rewards import ProblemError
    names = list(POLICIES) if args.policy == "all" else args.policy.split(",")
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        return _err(f"unknown policy {unknown[0]!r}{_did_you_mean(unknown[0], POLICIES)}; one of "
                    f"{', '.join(POLICIES)}, or all")
    rows = []
    try:
        for name in names:
            print(f"== {name}", file=sys.stderr, flush=True)
            rows.append(evaluate_policy(name, backend=args.backend, split=args.split, levels=args.level,
                                        problems=args.problem, episodes=args.episodes, seed=args.seed, log=sys.stderr))
    except (ProblemError, ValueError) as e:
        return _err(str(e))
    doc = {"command": "mkgym " + " ".join(sys.argv[1:]), "backend": rows[0]["backend"], "split": args.split,
           "board": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    if args.json:
        print(json.dumps(doc))
    else:
        print(format_board(rows))
    return 0


def _print_schedules(args, index: dict, what: str) -> int:
    if args.json:
        print(json.dumps(index))
        return 0
    for k in index["schedules"]:
        print(f"{k['problem']:28s} {k['sim_speedup']:.3f}x predicted ({k['edit_lines']} edit lines) -> "
              f"{os.path.join(args.out, k['folder'])}")
    print(f"{len(index['schedules'])} megakernel schedule(s) of {what} exported to {args.out}")
    return 0


def cmd_export(args) -> int:
    from megakernel_gym.policies.export import (ExportError, export_kernels, export_schedules, no_kernels_message,
                                                run_policy)
    from megakernel_gym.rewards.store import ResultsStore
    if args.policy:
        from megakernel_gym.policies.baselines import POLICIES
        from megakernel_gym.policies.lm import PolicyTextError
        if args.policy not in POLICIES:
            return _err(f"unknown policy {args.policy!r}{_did_you_mean(args.policy, POLICIES)}; one of "
                        f"{', '.join(POLICIES)}")
        try:
            index = export_schedules(args.out, args.policy, split=args.split, problems=args.problem or None,
                                     log=sys.stderr)
        except (ExportError, PolicyTextError) as e:
            return _err(str(e))
        return _print_schedules(args, index, f"the {args.policy} policy")
    if args.run:
        if args.store:
            return _err("give one of --run and --store: a run's kernels are those in its folder's results.sqlite")
        if not os.path.isdir(args.run):
            return _err(f"--run {args.run!r} is not a folder; give a training run's folder (the --out of mkgym "
                        "train grpo or mkgym train quickstart)")
        args.store = os.path.join(args.run, "results.sqlite")
        if not os.path.exists(args.store):
            trained = run_policy(args.run)
            if trained is None:
                return _err(no_kernels_message(args.run))
            # a quickstart run judged no kernels (the sim), but its trained policy plays: its schedules
            from megakernel_gym.policies.lm import PolicyTextError
            print(f"{args.run} judged no kernels (the sim backend); exporting the schedules its trained policy "
                  f"({trained['model']}) plays on {', '.join(trained['problems'])}", file=sys.stderr)
            try:
                index = export_schedules(args.out, "lm", problems=trained["problems"], device=trained["device"],
                                         model=trained["model"], log=sys.stderr)
            except (ExportError, PolicyTextError) as e:
                return _err(str(e))
            return _print_schedules(args, index, f"the policy trained in {args.run}")
    elif not args.store:
        from megakernel_gym.rewards.store import default_path as default_store_path
        return _err("name what to export: --run DIR (a training run's kernels), --store PATH (a results database; "
                    f"mkgym judge writes to {default_store_path()}, or MKGYM_STORE), or --policy NAME "
                    "(a policy's level-5 schedules); nothing else is exported")
    if not os.path.exists(args.store):
        return _err(f"--store {args.store!r} does not exist; give the path of a results database (MKGYM_STORE)")
    from megakernel_gym.rewards.store import StoreError
    try:
        store = ResultsStore(args.store)
    except StoreError as e:
        return _err(str(e))
    try:
        index = export_kernels(args.out, store=store, backend=args.backend)
    except ExportError as e:
        return _err(str(e))
    finally:
        if store is not None:
            store.close()
    if args.json:
        print(json.dumps(index))
        return 0
    for k in index["kernels"]:
        sp = f"{k['speedup']:.2f}x" if k["speedup"] else "correct"
        print(f"{k['problem']:28s} {sp:>9s}  {k['backend']:4s} {k['device'][:30]:30s} -> "
              f"{os.path.join(args.out, k['folder'])}")
    print(f"{len(index['kernels'])} kernel(s) exported to {args.out}"
          + (f"; dataset at {index['dataset']}" if index.get("dataset") else " (pip install datasets for the dataset)"))
    return 0


def cmd_train_quickstart(args) -> int:
    try:
        from megakernel_gym.policies.quickstart import train_quickstart
        from megakernel_gym.policies.train import TrainConfigError
    except ImportError as e:
        return _err(f"training needs TRL ({e}); pip install -e '.[train]'")
    extra = {"max_steps": args.steps} if args.steps else {}
    try:
        summary = train_quickstart(args.config, args.out, show_completions=args.show_completions,
                                   log=sys.stderr if args.json else sys.stdout, **extra)
    except (TrainConfigError, ValueError) as e:
        return _err(str(e))
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "curve"}))
    return 0


def cmd_train_grpo(args) -> int:
    try:
        from megakernel_gym.policies.train import TrainConfigError, train_grpo
    except ImportError as e:
        return _err(f"training needs TRL ({e}); pip install -e '.[train]'")
    if args.tiny:
        from megakernel_gym.policies.tiny import make_tiny_model
        from megakernel_gym.policies.train import load_config, prompt_dataset
        try:
            own, _ = load_config(args.config)
            texts = [r["prompt"] if isinstance(r["prompt"], str) else r["prompt"][-1]["content"]
                     for r in prompt_dataset(own)]
            args.model = make_tiny_model(args.tiny, texts, chat=bool(own["multi_turn"]))
        except TrainConfigError as e:
            return _err(str(e))
        print(f"made a tiny model at {args.model}", file=sys.stderr)
    if not args.model:
        return _err("give --model PATH_OR_NAME (a local causal LM), or --tiny DIR to make a tiny one here")
    import contextlib
    try:
        with contextlib.redirect_stdout(sys.stderr):   # the trainer prints its logs: stdout stays the result's
            trainer = train_grpo(args.model, args.config, out_dir=args.out, resume=args.resume)
    except TrainConfigError as e:
        return _err(str(e))
    last = next((h for h in reversed(trainer.state.log_history) if "reward" in h), {})
    summary = {"model": args.model, "out": args.out, "steps": trainer.state.global_step,
               "last_reward": last.get("reward"), "log_history": trainer.state.log_history}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"trained {summary['steps']} GRPO step(s); last mean reward {summary['last_reward']}; "
              f"checkpoints and the W&B run under {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="mkgym", description="megakernel-gym: score GPU kernels, train policies")
    sub = ap.add_subparsers(dest="command", required=True)

    j = sub.add_parser("judge", help="score one candidate kernel for one problem")
    j.add_argument("problem", help="built-in problem name (see `mkgym problems list`) or path to a "
                                   "KernelBench-format .py file")
    j.add_argument("candidate", help="path to a .py file defining ModelNew (or Model) or to an LLM's answer "
                                     "with a ```python block that does, '-' for stdin, or "
                                     "'reference' / 'reference:cuda' for a built-in problem's shipped candidate")
    j.add_argument("--backend", default=None, help="cpu or gpu (default: gpu when a CUDA device is present)")
    j.add_argument("--json", action="store_true", help="print exactly one EvalResult JSON object on stdout")
    j.add_argument("--store", default=None, help="results database path (default: user cache dir; "
                                                 "or MKGYM_STORE)")
    j.add_argument("--no-store", action="store_true", help="do not read or write the results database")
    j.add_argument("--no-cache", action="store_true", help="evaluate again even if the store has a result")
    j.add_argument("--timeout", type=float, default=None, help="seconds per evaluation (default 180 cpu, 90 gpu)")
    j.add_argument("--tolerance", default=None, metavar="PRESET",
                   help="tolerance preset where the problem sets no ATOL/RTOL: kernelbench (fp32 1e-4, bf16/fp16 "
                        "1e-2) or kbv3 (1e-2 for every dtype); default: the judge's own")
    j.add_argument("--pool", choices=["local", "ray"], default="local",
                   help="local: the user's judge server for this backend and store, started on first use and "
                        "left running until idle (default); ray: a judge actor on a Ray cluster")
    j.add_argument("--no-server", action="store_true",
                   help="with --pool local: judge in this process, starting its workers and closing them after "
                        "(also MKGYM_JUDGE_SERVER=0)")
    j.add_argument("--ray-address", default=None, help="with --pool ray: the cluster (HOST:PORT or "
                                                       "ray://HOST:10001; default RAY_ADDRESS, else a local Ray)")
    j.set_defaults(func=cmd_judge)

    js = sub.add_parser("judge-server", help="the judge servers `mkgym judge` starts: list them or stop them")
    js.add_argument("action", choices=["list", "stop"])
    js.add_argument("--json", action="store_true", help="print exactly one JSON value on stdout")
    js.set_defaults(func=cmd_judge_server)

    sv = sub.add_parser("serve", help="serve the judge over HTTP for remote trainers (POST /evaluate, GET /health)")
    sv.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--pool", choices=["local", "ray"], default="local", help="judges in local worker processes "
                                                                              "(default) or actors on a Ray cluster")
    sv.add_argument("--ray-address", default=None, help="with --pool ray: HOST:PORT or ray://HOST:10001 (default "
                                                        "RAY_ADDRESS, else a local Ray)")
    sv.add_argument("--backend", default=None, help="cpu or gpu (default: gpu where there are GPUs)")
    sv.add_argument("--workers", type=int, default=None, help="GPUs (or CPU judges) to use (default: all)")
    sv.add_argument("--store", default=None, help="results database path (default: user cache dir; or MKGYM_STORE)")
    sv.add_argument("--timeout", type=float, default=1800.0, help="seconds a request may take (default 1800)")
    sv.add_argument("--max-request-mb", type=float, default=4.0, help="largest request body accepted (default 4)")
    sv.add_argument("--allow-problem-source", action="store_true",
                    help="also take problem files' text (their code runs unsandboxed in the judge's reference "
                         "worker: trusted clients only)")
    sv.set_defaults(func=cmd_serve)

    c = sub.add_parser("compile", help="compile a zoo model to a validated megakernel plan")
    # every zoo model (tests/test_cli.py checks this against compiler.ZOO; the parser does not import torch)
    c.add_argument("model", help="zoo model: llama-tiny, mlp-tiny, attention-tiny, gpt2-tiny, hf-llama-tiny, "
                                 "mistral-tiny, mixtral-tiny, qwen2-tiny, qwen3-tiny, llama-1b, mlp-1b, attention-1b")
    c.add_argument("--sms", type=int, default=132, help="SMs of the target GPU (default 132)")
    c.add_argument("--tuned", action="store_true", help="start from the compiler's tuned schedule (fusions and "
                                                          "counters, as edits) instead of the default one")
    c.add_argument("--expert", action="store_true", help="start from the expert schedule (policies/expert.py: the tuned "
                                                           "edits, norms inlined into their matmuls, attention split "
                                                           "over its positions, q/k/v in one wave)")
    c.add_argument("--schedule", help="a file of edits (the edit language) applied before --edit")
    c.add_argument("--edit", action="append", help="edit text, e.g. 'tile lm_head n=64' (repeatable)")
    c.add_argument("--emit", choices=["ir", "tasks", "cuda", "json"], default=None,
                   help="print the op-level IR, the task-level detail, the megakernel's CUDA C, or (with --json) "
                        "everything")
    c.add_argument("--op", help="with --emit tasks: only this op")
    c.add_argument("--backend", choices=["cpu", "sim", "gpu"], default=None,
                   help="cpu: run the plan in the CPU VM and compare with eager; sim: predicted latency; "
                        "gpu: run the megakernel and measure it against the bandwidth floor")
    c.add_argument("--device", default="H200", help="GPU the sim backend predicts for (H100, H200)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_compile)

    d = sub.add_parser("demo", help="a short MegaKernel-v0 episode of a scripted policy, printed turn by turn")
    d.add_argument("--problem", default="mk_mlp_block", help="a built-in problem (default: the Llama-1B-shaped "
                                                              "MLP block as a megakernel)")
    d.add_argument("--backend", default=None, help="sim, cpu or gpu (default: the best one for the problem here)")
    d.add_argument("--out", default="runs/demo/timeline.png",
                   help="where to save the picture (PNG): the default and the best schedule's timelines")
    d.add_argument("--json", action="store_true", help="print one JSON summary on stdout (the episode goes to stderr)")
    d.set_defaults(func=cmd_demo)

    e = sub.add_parser("eval", help="a leaderboard: baseline policies' episodes over a suite split")
    e.add_argument("--policy", default="all", help="default, random, heuristic, search, reference; comma-separated, "
                                                   "or all (default)")
    e.add_argument("--backend", default="sim", help="sim (default), cpu or gpu")
    e.add_argument("--split", choices=["train", "heldout"], default=None, help="only this split (default: both)")
    e.add_argument("--level", type=int, action="append", help="only this level (repeatable; default: what the "
                                                              "backend serves)")
    e.add_argument("--problem", action="append", help="only this problem (repeatable)")
    e.add_argument("--episodes", type=int, default=1, help="episodes per problem (seeds seed, seed+1, ...)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default=None, help="also write the leaderboard as JSON to this file")
    e.add_argument("--json", action="store_true", help="print one JSON object on stdout (progress on stderr)")
    e.set_defaults(func=cmd_eval)

    x = sub.add_parser("export", help="the best correct kernel per problem of a run (--run) or a results store "
                                      "(--store), as files and a datasets dataset; or (--policy) a policy's "
                                      "level-5 megakernel schedules")
    x.add_argument("--out", required=True, help="folder to write (one subfolder per problem, index.json, dataset/)")
    x.add_argument("--run", default=None, help="a training run's folder: the kernels it judged (its results.sqlite); "
                                               "for a quickstart run (sim, no kernels judged), the level-5 "
                                               "schedules its trained policy plays")
    x.add_argument("--store", default=None, help="a results database: the best correct kernel of each problem in it")
    x.add_argument("--backend", choices=["cpu", "gpu"], default=None, help="only results from this backend")
    x.add_argument("--policy", default=None,
                   help="instead: play this policy (e.g. lm, expert) on the level-5 problems in the sim and write "
                        "each schedule as a runnable megakernel (schedule.edits, megakernel.cu, kernel.py)")
    x.add_argument("--split", default=None, help="with --policy: the problems of this split (train, heldout)")
    x.add_argument("--problem", action="append", help="with --policy: this level-5 problem (repeatable)")
    x.add_argument("--json", action="store_true", help="print the index as one JSON object")
    x.set_defaults(func=cmd_export)

    tr = sub.add_parser("train", help="train a policy (TRL)")
    trsub = tr.add_subparsers(dest="train_command", required=True)
    q = trsub.add_parser("quickstart", help="GRPO that shows learning on a CPU in minutes: a fresh tiny policy "
                                            "on level-5 schedules in the sim (policies/quickstart.py)")
    q.add_argument("--config", default=None, help="TOML (default: the shipped quickstart.toml): GRPOConfig fields "
                                                  "plus problems, n_layer, n_embd, device, drop_penalty, seed")
    q.add_argument("--out", default="runs/quickstart", help="the run folder: curve.json, reward_curve.png, W&B")
    q.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the config's max_steps)")
    q.add_argument("--show-completions", action="store_true", help="also print TRL's table of sampled completions")
    q.add_argument("--json", action="store_true", help="print the summary as one JSON object (steps go to stderr)")
    q.set_defaults(func=cmd_train_quickstart)
    g = trsub.add_parser("grpo", help="GRPO (TRL's GRPOTrainer) on the env's problems, rewarded by the env")
    g.add_argument("--model", default=None, help="a local Hugging Face causal LM folder (or a cached hub name)")
    g.add_argument("--tiny", default=None, metavar="DIR", help="make a tiny GPT-2 (tokenizer trained on the prompts) "
                                                               "in DIR and train that")
    g.add_argument("--config", default=None, help="TOML: GRPOConfig fields plus levels, split, problems, backend, "
                                                  "repeat")
    g.add_argument("--out", default="runs/grpo", help="checkpoints and the W&B run (offline unless you have a key)")
    g.add_argument("--resume", action="store_true", help="resume from the last checkpoint in --out")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_train_grpo)

    p = sub.add_parser("problems", help="problem suites: list, show, check")
    psub = p.add_subparsers(dest="problems_command", required=True)
    suite_help = "builtin (default), a KernelBench-layout folder, or a folder saved by datasets' save_to_disk"
    pl = psub.add_parser("list", help="list the problems of a suite")
    pl.add_argument("--suite", default=None, help=suite_help)
    pl.add_argument("--level", type=int, default=None)
    pl.add_argument("--split", choices=["train", "heldout"], default=None)
    pl.add_argument("--tag", action="append", help="only problems with this tag (repeatable)")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=cmd_problems_list)
    ps = psub.add_parser("show", help="one problem: metadata, description and source")
    ps.add_argument("name", help="a built-in name, a path, or a name in --suite")
    ps.add_argument("--suite", default=None, help=suite_help)
    ps.add_argument("--json", action="store_true")
    ps.set_defaults(func=cmd_problems_show)
    pc = psub.add_parser("check", help="refuse problems that reward trivial kernels (robust-kbench filters, "
                                       "self-test); exits 1 if any is refused")
    pc.add_argument("targets", nargs="*", help="built-in names, .py files or suite folders (default: every "
                                              "built-in problem, with the built-ins' metadata rules)")
    pc.add_argument("--backend", default="cpu", help="cpu (small sizes, default) or gpu (the real sizes)")
    pc.add_argument("--level", type=int, default=None)
    pc.add_argument("--strict", action="store_true", help="apply the built-ins' metadata rules to any file")
    pc.add_argument("--out", default=None, help="also write the full report as JSON to this file")
    pc.add_argument("--json", action="store_true")
    pc.set_defaults(func=cmd_problems_check)

    cu = sub.add_parser("curriculum", help="the curriculum: levels, promotion, saved state")
    cusub = cu.add_subparsers(dest="curriculum_command", required=True)
    cs = cusub.add_parser("show", help="levels, pools, promotion rules, and progress from a saved state")
    cs.add_argument("state", nargs="?", default=None, help="a state file written by Curriculum.save")
    cs.add_argument("--config", default=None, help="a curriculum TOML file (default: the shipped default.toml)")
    cs.add_argument("--json", action="store_true")
    cs.set_defaults(func=cmd_curriculum_show)
    return ap


def main(argv: list[str] | None = None) -> int:
    global _json_errors
    argv = sys.argv[1:] if argv is None else list(argv)
    _json_errors = "--json" in argv
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
