"""MegaKernel-v0: write a faster correct kernel, or edit a whole model's megakernel schedule.

One episode is one problem from the curriculum. Op-level problems (levels 1-4): the action is
kernel code (a ```python block defining ModelNew), scored by the judge on the cpu or gpu
backend. Megakernel problems (level 5): the action is edit-language text over the compiler's
IR; `sim` scores it by the cost model's predicted latency against the default schedule, `cpu`
by running the plan in the CPU VM against the graph's reference, `gpu` by running the megakernel
(with any `impl` task bodies) on several seeds and timing it against the default schedule's
(rewards/megakernel.py). Off the GPU an `impl` body is compiled, never run, and the plan is
`not_run` (the failure tier's reward): nothing scores code it did not run. `submit` ends an
episode; the level's turn limit truncates it.

Reward (default "improvement", rewards.reward_fns.TurnRewards): each turn earns its score (gated
log-speedup) minus the previous turn's, the first turn its score minus the start's (0: a level-5
episode starts from the default schedule, which scores 0 against itself on sim and cpu, and its own
score against the fastest baseline on gpu; -1, the failure tier, for kernel code), so a slower schedule
earns a negative reward and a faster one a positive one; the last turn also earns the best score minus
its own, so an episode's return is the best score found minus the start. "best" gives only each turn's
rise of the best so far (same return, never negative); "score" each turn's score as is; "kevin"
0.3 * correct + speedup per turn (discount it with `discounted_returns`). Under "score" and "kevin"
`submit` earns what keeping the kernel as it stands to the turn limit would (_submit_reward). On the GPU
a turn is credited as the new best only past its timing's noise (reward_fns.credit_margin).
"""
from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from megakernel_gym.curriculum import Suite, load_suite
from megakernel_gym.curriculum.curriculum import Curriculum
from megakernel_gym.ir_exposure.observe import CHARSET, feedback, printable, prompt, read_action
from megakernel_gym.rewards import Candidate, EvalResult, ProblemError
from megakernel_gym.rewards.judge import problem_failure
from megakernel_gym.rewards.reward_fns import (TurnRewards, credit_margin, gated_log_speedup, kevin_reward,
                                               log_speedup_score)

BACKENDS = ("sim", "cpu", "gpu")
REWARDS = ("improvement", "best", "score", "kevin")
MAX_PROBLEM = 32_000
MAX_CODE = 120_000        # a 1B-shaped model's IR is ~9k characters; candidates rarely pass 30k
MAX_FEEDBACK = 16_000
MAX_ACTION = 120_000
FLOOR_SCORE = -1.0        # the failure tier: where a kernel-code episode starts
# how `impl` bodies compile off the GPU, for feedback only (_Megakernel.compile_problem): to PTX for
# Hopper's virtual arch, unoptimized
FEEDBACK_ARCH = "compute_90"
FEEDBACK_OPTIONS = ("-G",)


KEVIN_GAMMA = 0.4    # Kevin-32B's discount of later turns' rewards


def discounted_returns(rewards: list[float], gamma: float = KEVIN_GAMMA) -> list[float]:
    """Kevin-32B's per-turn returns: G_t = r_t + gamma * G_{t+1}."""
    out, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        out.append(g)
    return out[::-1]


def _resolve_backend(backend: str | None) -> str:
    """The judge's rule (gpu when a CUDA device is present, else cpu), plus the cost model's sim."""
    from megakernel_gym.rewards.judge import GPUUnavailableError, resolve_backend
    if backend == "sim":
        return backend
    if backend not in (None, "auto", "cpu", "gpu"):
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)} (or leave it out: "
                         "gpu when a CUDA device is present, else cpu)")
    try:
        return resolve_backend(backend)
    except GPUUnavailableError as e:
        raise ValueError(f"{e} (or backend='sim' for megakernel problems)") from e


class _Megakernel:
    """One level-5 problem compiled: the graph, its default IR, and how to score an IR."""

    _graphs: dict[tuple, Any] = {}    # captured graphs per (problem, sizes), shared by all envs in a process

    def __init__(self, problem, backend: str, num_sms: int, device: str):
        from megakernel_gym.compiler import capture, module_tensors, predict
        from megakernel_gym.compiler.capture import capture_cached
        from megakernel_gym.compiler.zoo import make_block, step_config
        from megakernel_gym.ir_exposure import make_ir
        mod = _load_trusted(problem)
        config = (mod.CPU_SIZES.get("config", mod.config) if backend == "cpu" else mod.config)
        self.block, self.cfg = mod.block, step_config(mod.block, config)
        self.backend, self.device = backend, device
        key = (problem.sha256, backend)
        if backend == "cpu":
            module, inputs = make_block(self.block, self.cfg, seed=0)
            graph = self._graphs.get(key) or capture(module, inputs, problem.name)
            self.params, self.feeds = module_tensors(module), dict(zip(graph.inputs, inputs))
        else:   # shapes are enough to compile and predict: nothing is allocated; the graph is kept on disk
            graph = self._graphs.get(key) or capture_cached(
                f"{problem.sha256}\0{sorted(config.items())}",
                lambda: make_block(self.block, self.cfg, device="meta"), problem.name)
        self._graphs[key] = graph
        self.graph = graph
        self.config = config
        self.ir0 = make_ir(graph, num_sms=num_sms)
        self.default = predict(self.ir0.plan(), device)
        self.gpu_judge = None

    def compile_problem(self, ir) -> str | None:
        """Off the GPU, `impl` task bodies are compiled (NVRTC, in a process of its own under a time
        limit, with no include path) for feedback, never run: why the megakernel does not compile, or
        None. Only to PTX for Hopper's virtual arch, unoptimized (FEEDBACK_ARCH, FEEDBACK_OPTIONS): the
        parser's and type checker's errors are the gpu backend's, but a body NVRTC's optimizer takes a
        minute over (a red team's nested constant loops, fully unrolled: 7.6k characters past the 60 s
        limit, one sim step each) compiles in half a second, and no cubin nothing loads is made. The
        compiler's log is cut to diagnostics located in the megakernel's own source
        (impl_guard.compile_log_for_agent), so no other file's text can come back."""
        if not ir.impls:
            return None
        from megakernel_gym.compiler.codegen import CodegenError, emit_cuda
        from megakernel_gym.compiler.impl_guard import compile_log_for_agent
        from megakernel_gym.cuda.nvrtc import IMPL_COMPILE_TIMEOUT_S, CudaCompileError, compile_cuda
        try:
            source = emit_cuda(ir.plan(), impls=ir.impls)[0]
            compile_cuda(source, "megakernel.cu", FEEDBACK_OPTIONS, FEEDBACK_ARCH, host_includes=False,
                         timeout_s=IMPL_COMPILE_TIMEOUT_S)
        except CodegenError as e:
            return str(e)
        except CudaCompileError as e:
            if getattr(e, "category", "") in ("compile_timeout", "compile_crash"):
                return str(e.log)
            return f"NVRTC refused the megakernel with your task body:\n{compile_log_for_agent(e.log, source)}"
        return None

    def start_score(self) -> float:
        """The default schedule's score, where an episode starts: 0 on sim and cpu (speedup 1 over
        itself; the VM's correct plan without timing); on gpu its log-speedup over the fastest baseline
        the judge timed at start-up (eager PyTorch or CUDA graphs may be faster than the default)."""
        if self.backend != "gpu":
            return 0.0
        judge = self._gpu_judge()
        base = judge.ready["baselines"]
        return log_speedup_score(min(v["median_us"] for v in base.values()) / base["default_schedule"]["median_us"])

    def _gpu_judge(self):
        if self.gpu_judge is None:
            from megakernel_gym.rewards.megakernel import MegakernelJudge
            self.gpu_judge = MegakernelJudge(self.block, self.config, self.ir0.plan())
        if self.gpu_judge.ready is None:
            self.gpu_judge.start()
        return self.gpu_judge

    def close(self) -> None:
        if self.gpu_judge is not None:
            self.gpu_judge.close()
            self.gpu_judge = None

    def score(self, ir, problem, cand_sha: str) -> EvalResult:
        from megakernel_gym.compiler import predict
        p = predict(ir.plan(), self.device)
        timing = {"predicted_us": round(p.latency_us, 3), "floor_us": round(p.floor_us, 3),
                  "device": f"{self.device} (predicted)"}
        base = {"default_schedule": {"predicted_us": round(self.default.latency_us, 3)}}
        if self.backend == "gpu":
            res = self._gpu_judge().evaluate(ir.plan(), ir.impls, problem, cand_sha)
            if res.timing is not None:
                res.timing.update(predicted_us=timing["predicted_us"], floor_us=timing["floor_us"])
            return res
        problem_text = self.compile_problem(ir)
        if problem_text:
            return EvalResult(status="compile_error", reason=problem_text, problem=problem.name, backend=self.backend,
                              candidate_sha256=cand_sha, problem_sha256=problem.sha256, category="compile")
        if ir.impls:
            # code this backend did not run is not scored: neither sim's prediction nor the CPU VM (which
            # runs the generated bodies) says anything about what an impl body computes or costs
            ops = ", ".join(ir.impls)
            timing["note"] = (f"impl bodies of {ops} compiled, not run; the prediction uses the generated bodies' "
                              "costs")
            return EvalResult(status="not_run", reason=f"compiled, not run: impl bodies are scored on the gpu backend "
                              f"only (this is the {self.backend} backend; the bodies of {ops} compiled). `unimpl` "
                              "them to score the schedule here", problem=problem.name, backend=self.backend,
                              candidate_sha256=cand_sha, problem_sha256=problem.sha256, category="impl_not_run",
                              device=timing["device"] if self.backend == "sim" else "cpu", baselines=base, timing=timing)
        if self.backend == "sim":
            speedup = self.default.latency_us / p.latency_us
            return EvalResult(status="correct", reason=f"valid schedule, predicted {p.latency_us:.1f} us vs "
                              f"{self.default.latency_us:.1f} us for the default ({speedup:.3f}x)",
                              problem=problem.name, backend="sim", candidate_sha256=cand_sha,
                              problem_sha256=problem.sha256, device=timing["device"], speedup=speedup,
                              speedups={"default_schedule": speedup}, baselines=base, timing=timing)
        import torch

        from megakernel_gym.compiler import run_graph, run_plan
        got = run_plan(ir.plan(), self.params, self.feeds, rng=0, adversarial=True)
        ref = run_graph(self.graph, self.params, self.feeds)
        worst = max(float((got[k].double() - v.double()).abs().max()) for k, v in ref.items())
        ok = all(torch.allclose(got[k].double(), v.double(), atol=1e-4, rtol=1e-4) for k, v in ref.items())
        seeds = [{"seed": 0, "label": "vm-vs-graph", "max_abs_err": worst, "ok": ok}]
        if not ok:
            return EvalResult(status="incorrect", reason=f"the plan run in the CPU VM differs from the graph's "
                              f"reference (max abs err {worst:.3g})", problem=problem.name, backend="cpu",
                              candidate_sha256=cand_sha, problem_sha256=problem.sha256, device="cpu",
                              seeds=seeds, category="mismatch", timing=timing)
        return EvalResult(status="correct", reason=f"the plan run tile by tile in the CPU VM matches the reference "
                          f"(max abs err {worst:.2g}); cpu backend: correctness only, the predicted time is "
                          "information, not a speedup", problem=problem.name, backend="cpu",
                          candidate_sha256=cand_sha, problem_sha256=problem.sha256, device="cpu", seeds=seeds,
                          baselines=base, timing=timing)


def _load_trusted(problem):
    """A megakernel problem's module, run in this process: level-5 problems configure the compiler
    (block and sizes) and come from the built-in suite or the user's own files, not from the agent."""
    spec = importlib.util.spec_from_loader(f"mkgym_l5_{problem.sha256[:12]}", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(problem.source, problem.path or problem.name, "exec"), mod.__dict__)  # noqa: S102
    for need in ("block", "config"):
        if not hasattr(mod, need):
            raise ProblemError(f"{problem.name}: a megakernel problem (KIND = 'megakernel') sets `{need}`")
    return mod


def pool_kind(pool) -> str:
    """The kind of pool to make for `pool=`: a name, or "local" (unused) for a pool object or None."""
    from megakernel_gym.rewards.pool import POOLS
    if isinstance(pool, str) and pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; use one of {', '.join(POOLS)}, or pass a pool object "
                         "(LocalPool, RayPool)")
    return pool if isinstance(pool, str) else "local"


@dataclass
class Pending:
    """A step between its halves: a submit, a result already known, or a (problem, candidate) to judge."""
    act: Any
    result: EvalResult | None = None
    job: tuple | None = None


def judge_pending(pendings: dict[Any, Pending], pool_of: Callable[[], Any]) -> dict[Any, EvalResult | None]:
    """Each pending step's result for end_step: the kernels among them judged together in one
    evaluate_many on `pool_of()` (called only when there is a kernel to judge), the others' as
    they are (a submit's None)."""
    jobs = [(k, p.job) for k, p in pendings.items() if p.job is not None]
    judged = dict(zip((k for k, _ in jobs), pool_of().evaluate_many([j for _, j in jobs]))) if jobs else {}
    return {k: judged.get(k, p.result) for k, p in pendings.items()}


class MegaKernelEnv(gym.Env):
    """See the module docstring. Spaces: Text actions; observations a Dict of Text (problem
    statement, current code or IR, feedback on the last action). Kernels are scored by the env's
    own judge, or with `pool=` by a pool: "ray" (a one-judge RayPool) or a pool object to share."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 1}

    def __init__(self, backend: str | None = None, curriculum: Curriculum | str | None = None,
                 suite: Suite | None = None, reward: str = "improvement", render_mode: str | None = None,
                 device: str = "H200", num_sms: int = 132, judge_timeout: float | None = None, pool=None):
        self.backend = _resolve_backend(backend)
        self._pool_kind = pool_kind(pool)
        self._pool = None if isinstance(pool, str) else pool   # a pool object is the caller's: never closed here
        self._refused: set[str] = set()   # problems (sha256) the judge could not run: not drawn again
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; use one of {', '.join(REWARDS)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.reward_mode, self.render_mode = reward, render_mode
        self.device, self.num_sms, self.judge_timeout = device, num_sms, judge_timeout
        self.curriculum = curriculum if isinstance(curriculum, Curriculum) else Curriculum(curriculum, suite)
        charset = "".join(sorted(CHARSET))
        self.observation_space = spaces.Dict({
            "problem": spaces.Text(MAX_PROBLEM, min_length=0, charset=charset),
            "code": spaces.Text(MAX_CODE, min_length=0, charset=charset),
            "feedback": spaces.Text(MAX_FEEDBACK, min_length=0, charset=charset)})
        self.action_space = spaces.Text(MAX_ACTION, min_length=0, charset=charset)
        self._judge = None
        self._mk: dict[str, _Megakernel] = {}
        self._done = True
        self.problem = None

    # -- episodes ------------------------------------------------------------------------
    def _serves(self, level) -> bool:
        """Whether this backend can score a problem of `level`: sim only megakernels, cpu and gpu all."""
        return self.backend != "sim" or level == 5

    def _levels(self) -> list[int]:
        """The curriculum's active levels this backend can score (_serves)."""
        return [lv for lv in self.curriculum.active if self._serves(lv)]

    def _draw(self, options: dict | None):
        suite = self.curriculum.suite
        options = options or {}
        unknown = set(options) - {"problem", "level", "suite"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use {{'problem': NAME}}, {{'level': N}} "
                             "or {'suite': NAME} (with either)")
        if "suite" in options:
            return self._draw_from(options["suite"], options)
        if "problem" in options:
            problem = suite.get(options["problem"])
            if problem.level not in self._levels() and problem.level is not None:
                raise ValueError(f"problem {problem.name!r} (level {problem.level}) cannot be scored on the "
                                 f"{self.backend} backend, which serves levels {self._levels()}")
            return problem
        levels = self._levels()
        if not levels:
            raise ValueError(f"the curriculum's suite has no problems the {self.backend} backend can score")
        level = options.get("level")
        if level is None:
            level = self.curriculum.level if self.curriculum.level in levels else levels[-1 if
                                                                                        self.backend == "sim" else 0]
        if level not in levels:
            raise ValueError(f"level {level} is not one the {self.backend} backend serves ({levels})")
        for _ in range(64):   # a problem the judge could not run (_refused) is drawn again
            problem = suite.get(self.curriculum.sample(level=level, rng=self.np_random).problem)
            if problem.sha256 not in self._refused:
                return problem
        raise ValueError(f"level {level}'s problems that were drawn could not be run by the {self.backend} "
                         f"backend's judge ({len(self._refused)} refused); use another level or backend")

    def _draw_from(self, name, options: dict):
        """A problem of another suite (load_suite's names: 'kernelbench', a folder, ...), by name or at a
        level (uniformly among that level's problems the backend can score); the curriculum's own state
        is left as it is."""
        if not isinstance(name, str):
            raise ValueError(f"reset option 'suite' must be a suite name or path, not {type(name).__name__}")
        suites = self.__dict__.setdefault("_other_suites", {})
        if name not in suites:
            suites[name] = load_suite(name)
        suite = suites[name]
        if "problem" in options:
            problem = suite.get(options["problem"])
            if not self._serves(problem.level):
                raise ValueError(f"problem {problem.name!r} (level {problem.level}) cannot be scored on the sim "
                                 "backend, which serves only level-5 megakernels; use backend='cpu' or 'gpu'")
            return problem
        served = [p for p in suite.problems if self._serves(p.level)]
        if not served:
            raise ValueError(f"suite {name!r} has no level-5 megakernels, the only problems the sim backend "
                             "scores; use backend='cpu' or 'gpu'")
        level = options.get("level")
        pool = [p for p in served if (level is None or p.level == level) and p.sha256 not in self._refused]
        if not pool:
            levels = sorted({p.level for p in served if p.level is not None})
            raise ValueError(f"suite {name!r} has no problems at level {level} that the {self.backend} backend "
                             f"can score (it serves levels {levels})")
        return pool[int(self.np_random.integers(len(pool)))]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.problem = self._draw(options)
        self.kind = "edits" if self.problem.meta.get("KIND") == "megakernel" else "code"
        self.turns = self.curriculum.turns(self.problem.level) if self.problem.level in self.curriculum.pools else 10
        self.turn, self.rewards = 0, []
        self.best_result: EvalResult | None = None
        self.best_ir = None     # level 5: the schedule of best_result (None: the default stands)
        # the episode's judged kernels and schedules by their text's sha256 -> (turn, result): the same one
        # sent again gets that result, not a fresh timing. On a GPU each timing is a draw of its noise, and the
        # best turn is what the return keeps, so a sixth red team's 20 turns of one schedule would have
        # collected the best of 20 draws (0.2-0.4% apart for one H200 schedule) for no kernel written
        self._judged: dict[str, tuple[int, EvalResult]] = {}
        start = FLOOR_SCORE
        if self.kind == "edits":
            mk = self._mk.get(self.problem.sha256)
            if mk is None:
                mk = self._mk[self.problem.sha256] = _Megakernel(self.problem, self.backend, self.num_sms,
                                                                 self.device)
                from megakernel_gym.compiler.pause_gc import keep_built_structures_out_of_gc
                keep_built_structures_out_of_gc()
            self.ir = mk.ir0
            from megakernel_gym.ir_exposure import render
            self.code = render(self.ir)
            self.last = (f"default schedule: predicted {mk.default.latency_us:.1f} us on {self.device} "
                         f"(floor {mk.default.floor_us:.1f} us). Edit it to go faster; `submit` when done.")
            start = mk.start_score()
        else:
            self.code, self.last = "", "no kernel yet: write ModelNew."
        self._turn_rewards = TurnRewards("score" if self.reward_mode == "kevin" else self.reward_mode, start)
        # what a turn that changes nothing would earn now under "score" and "kevin" (the kernel or schedule
        # as it stands, judged again): what `submit` pays for each turn it leaves (_submit_reward)
        self._kept = start
        if self.reward_mode == "kevin":     # nothing written yet, or the default schedule: correct, and timed but on cpu
            self._kept = 0.0 if self.kind == "code" else 0.3 + (math.exp(start) if self.backend != "cpu" else 0.0)
        self._done = False
        obs = self._obs()
        return obs, self._info(obs, None, None)

    @property
    def default_ir(self):
        """A level-5 episode's starting point: the compiler's default schedule (None for kernel code)."""
        mk = self._mk.get(self.problem.sha256) if self.kind == "edits" else None
        return mk.ir0 if mk is not None else None

    @property
    def best(self) -> float:
        """The episode's best score so far (its start until a turn does better)."""
        return self._turn_rewards.best

    def step(self, action):
        pending = self.begin_step(action)
        res = pending.result
        if pending.job is not None:
            try:
                res = self._get_judge().evaluate(*pending.job)
            except ProblemError as e:   # as a pool reports it (judge.judge_one)
                res = problem_failure(e, *pending.job, self.backend)
        return self.end_step(pending, res)

    # A step in two halves, so a vector env can judge many envs' kernels at once on a pool:
    # begin_step reads the action and does everything but the judge; end_step takes the result.
    def begin_step(self, action) -> "Pending":
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended (submitted or out of turns); call reset()")
        self.turn += 1
        act = read_action(action, self.kind, MAX_ACTION)
        if act.kind == "submit":
            return Pending(act)
        if act.kind == "code":
            self.code = act.text
            cand = Candidate(act.text)
            again = self._judged_again(cand.sha256, "kernel")
            return Pending(act, result=again) if again is not None else Pending(act, job=(self.problem, cand))
        return Pending(act, result=self._evaluate(act))

    def _judged_again(self, sha: str, what: str) -> EvalResult | None:
        """The result this episode's kernel or schedule of that text had, told as such, or None."""
        if sha not in self._judged:
            return None
        turn, res = self._judged[sha]
        return replace(res, reason=f"the same {what} as turn {turn}: its result then, not judged again. {res.reason}")

    def end_step(self, pending: "Pending", res: EvalResult | None):
        act = pending.act
        if act.kind == "submit":
            self._done = True
            reward, why = self._submit_reward()
            self.rewards.append(reward)
            self.last = (f"submitted after {self.turn - 1} turn(s); best score {self.best:+.3f}"
                         + (f"; reward {reward:+.3f} ({why})" if reward else ""))
            obs = self._obs()
            return obs, reward, True, False, self._info(obs, None, act)
        res.elapsed_s = None   # wall time is not part of what an agent is told or scored on
        if act.kind in ("code", "edits") and res.category not in ("edit", "bad_action", "unservable"):
            self._judged.setdefault(res.candidate_sha256, (self.turn, res))
        if res.category == "unservable":
            # the judge cannot run the problem on this backend at all (say, too large for its host), known before
            # any kernel ran: nothing the agent did. The episode ends with no reward, and the problem is not drawn
            # again. (Any other problem error stays what it was: a judge-side failure.)
            self._refused.add(self.problem.sha256)
            self._done = True
            self.rewards.append(0.0)
            self.last = (f"the judge could not run this problem on the {self.backend} backend, so the episode "
                         f"ends with no reward (not the kernel's doing):\n{res.reason}")
            obs = self._obs()
            info = self._info(obs, res, act)
            info["problem_error"] = res.reason
            return obs, 0.0, False, True, info
        score = gated_log_speedup(res)
        truncated = self.turn >= self.turns
        # a GPU timing is credited as the new best only past its noise (credit_margin): a kernel no better
        # than the best, sent again with its text changed, draws its timing again and earns nothing from it
        reward = self._turn_rewards.turn(score, last=truncated, margin=credit_margin(res, self.kind))
        if self._turn_rewards.credited:
            self.best_result = res
            self.best_ir = self.ir if self.kind == "edits" else None
        if self.reward_mode == "kevin":
            reward = kevin_reward(res)
        if res.category not in ("edit", "bad_action"):      # (a refused edit or action leaves what stands)
            self._kept = reward
        self.rewards.append(reward)
        self.last = feedback(res, self.turn, self.turns, self.best, reward)
        self._done = truncated
        if truncated:
            self.last += f"\nturn limit ({self.turns}) reached: the episode ends."
        obs = self._obs()
        return obs, float(reward), False, truncated, self._info(obs, res, act)

    def _submit_reward(self) -> tuple[float, str]:
        """What `submit` earns, and why. Under "improvement" the best score minus the last turn's, so the
        return is the best found minus the start; under "best" nothing. Under "score" and "kevin", where
        each turn pays for the kernel as it stands, what a turn that changed nothing would earn, once for
        this turn and each left to the limit (kevin: discounted by KEVIN_GAMMA, as discounted_returns
        does): ending an episode is worth what keeping the kernel to the limit is, where a fifth red team
        found `submit` worth nothing and turns of no-ops worth 1.3 each (kevin on a level-5 problem)."""
        if self.reward_mode in ("improvement", "best"):
            return self._turn_rewards.submit(), "the best minus the last turn's score"
        left = self.turns - self.turn + 1
        kevin = self.reward_mode == "kevin"
        weight = (1.0 - KEVIN_GAMMA ** left) / (1.0 - KEVIN_GAMMA) if kevin else left
        # at most what the best credited would earn a turn: a kernel no better than it, sent until a timing
        # drew fast and then submitted, would have multiplied that draw by every turn left
        best = self.best if not kevin else 0.3 + math.exp(self.best)
        kept = best if self._kept > best + 1e-9 else self._kept      # (exp(ln s) is s to rounding: no cap)
        return (float(kept * weight), f"the kernel as it stands, {kept:+.3f} a turn for {left} turn(s)"
                + (f" discounted by {KEVIN_GAMMA}" if kevin else "")
                + (f" (its last timing, {self._kept:+.3f}, within the noise above the best credited)"
                   if kept < self._kept else ""))

    def _fail(self, status: str, reason: str, category: str) -> EvalResult:
        from megakernel_gym.rewards.problem import sha256
        return EvalResult.failure(status, reason, self.problem, sha256(""), self.backend, category=category)

    def _evaluate(self, act) -> EvalResult:
        if act.kind == "invalid":
            return self._fail("compile_error", act.why, "bad_action")
        from megakernel_gym.compiler.validate import ScheduleError
        from megakernel_gym.ir_exposure import EditError, IRError, apply_edits, render
        from megakernel_gym.rewards.problem import sha256
        try:
            ir = apply_edits(self.ir, act.text)
            ir.plan()
        except (EditError, IRError, ScheduleError) as e:
            return self._fail("compile_error", str(e), "edit")
        self.ir, self.code = ir, render(ir)
        sha = sha256(self.code)
        again = self._judged_again(sha, "schedule")
        return again if again is not None else self._mk[self.problem.sha256].score(ir, self.problem, sha)

    def _get_judge(self):
        """What scores kernels: the caller's pool, else this env's own judge (or one-judge pool)."""
        if self._pool is not None:
            return self._pool
        if self._judge is None:
            if self._pool_kind == "local":
                from megakernel_gym.rewards import Judge
                self._judge = Judge(backend=self.backend, store=None, timeout_s=self.judge_timeout)
            else:
                from megakernel_gym.rewards import make_pool
                self._judge = make_pool(self._pool_kind, self.backend, num_workers=1, slots_per_gpu=1, store=None,
                                        timeout_s=self.judge_timeout)
        return self._judge

    # -- observations, info, rendering ---------------------------------------------------
    def _statement(self) -> str:
        p = self.problem
        head = f"# {p.name}: level {p.level}, {self.turns} turns\n{p.description}\n"
        if p.production:    # the kernels a practitioner would use: the speedup is over the fastest of all
            head += ("Timed on a GPU against eager PyTorch, its CUDA graph, torch.compile and the production kernels "
                     + "; ".join(f"{n} ({why})" for n, why in p.production.items())
                     + "; the speedup is over the fastest.\n")
        if self.kind == "code":
            return head + ("\nWrite ModelNew: same constructor as Model, same outputs within tolerance, your own "
                           "Triton or CUDA C kernels (torch compute in forward is rejected).\n\n```python\n"
                           + p.source.rstrip() + "\n```\n")
        from megakernel_gym.compiler.codegen import IMPL_CONTRACT
        from megakernel_gym.ir_exposure import LEGEND
        return (head + "\nThe megakernel IR below runs this model as one persistent kernel. " + LEGEND + "\n"
                + IMPL_CONTRACT + "\n")

    def _obs(self) -> dict[str, str]:
        return {"problem": printable(self._statement(), MAX_PROBLEM), "code": printable(self.code, MAX_CODE),
                "feedback": printable(self.last, MAX_FEEDBACK)}

    def _info(self, obs: dict[str, str], res: EvalResult | None, act) -> dict[str, Any]:
        info = {"problem": self.problem.name, "level": self.problem.level, "kind": self.kind, "turn": self.turn,
                "turns": self.turns, "backend": self.backend, "best_score": self.best,
                "prompt": prompt(obs, self.kind)}
        if act is not None:
            info["action"] = {"kind": act.kind, "text": act.text[:2000], "why": act.why}
        if res is not None:
            info["eval"] = res.to_dict()
        return info

    def render(self):
        """ansi: the statement, the current code or IR and the feedback as text. rgb_array: for a
        megakernel, the per-SM timeline of the current schedule (predicted by the cost model);
        for an op-level problem, bars of the last timed result against its baselines."""
        if self.render_mode is None or self.problem is None:
            return None
        if self.render_mode == "rgb_array":
            from megakernel_gym.env.timeline import timeline_image, times_image
            if self.kind == "edits":
                from megakernel_gym.compiler import predict
                plan = self.ir.plan()
                return timeline_image(plan, predict(plan, self.device))
            return times_image(self.best_result)
        o = self._obs()
        return f"{o['problem'][:2000]}\n--- current {'kernel' if self.kind == 'code' else 'IR'} ---\n" \
               f"{o['code']}\n--- feedback ---\n{o['feedback']}\n"

    def close(self):
        if self._judge is not None:
            self._judge.close()
            self._judge = None
        for mk in self._mk.values():
            mk.close()
