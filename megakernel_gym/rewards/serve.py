"""The judge as an HTTP reward service, for trainers that compute rewards away from the GPUs that
judge (TRL's async GRPO, other frameworks): a FastAPI app in front of any pool, and a client
whose reward function a TRL trainer calls like any other.

    mkgym serve --pool ray --port 8000                         # where the judging GPUs are
    GRPOTrainer(..., reward_funcs=[make_reward_fn("http://judge-host:8000")])   # in the trainer

    POST /evaluate  {"items": [{"problem": "softmax", "candidate": "<python source>"}, ...]}
                    ("problem_source": a KernelBench-format file's text, instead of a built-in name)
                 -> {"results": [<EvalResult JSON> + "reward" (gated log-speedup), ...]}, in input order
                    (a NaN or infinite number in a result is sent as null)
    GET  /health -> {"ok": true, "pool", "backend", "size", limits}

Bounds: a body over `max_request_bytes` is refused with 413 before it is parsed; a body that
is not JSON gets 400, one of the wrong shape 422, each saying what is wrong. One batch runs on
the pool at a time and at most `max_waiting` more wait (503 past that). A batch still running
after `timeout_s` answers 504; it finishes anyway and its results reach the results store.
"""
# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time,
# and `Request` is imported inside make_app (fastapi is an optional dependency)
import asyncio
import concurrent.futures
import importlib.util
import json
import math
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from megakernel_gym.rewards.problem import Candidate, Problem, ProblemError, sha256
from megakernel_gym.rewards.result import EvalResult
from megakernel_gym.rewards.reward_fns import REWARD_FUNCTIONS, gated_log_speedup

MAX_REQUEST_BYTES = 4 << 20   # a GRPO step of 512 completions of ~4 KB each fits in one request
MAX_ITEMS = 4096
TIMEOUT_S = 1800.0            # 512 evaluations at 5 / s on one GPU take ~100 s; a cold start more
DRAIN_FACTOR = 16             # an oversized body up to 16x the limit is read (and dropped) before the 413
INSTALL_HINT = "pip install 'megakernel-gym[serve]'"


class RewardServiceError(RuntimeError):
    """The reward service refused a request or did not answer; the message says why."""


def require() -> None:
    """ImportError, naming the extra to install, when the server's packages are missing."""
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"the reward service needs {' and '.join(missing)}, not installed here; {INSTALL_HINT}")


# -- the server ----------------------------------------------------------------------------
class _Busy(Exception):
    pass


class _BatchRunner:
    """One batch on the pool at a time (a pool's judges serve one evaluate_many call at once);
    at most `max_waiting` more wait their turn."""

    def __init__(self, pool, max_waiting: int):
        self.pool = pool
        self.lock = threading.Lock()
        self.admitted = threading.BoundedSemaphore(max_waiting + 1)
        self.executor = concurrent.futures.ThreadPoolExecutor(max_waiting + 1, thread_name_prefix="mkgym-serve")

    async def run(self, jobs: list[tuple[Problem, Candidate]], timeout_s: float) -> list[EvalResult]:
        if not self.admitted.acquire(blocking=False):
            raise _Busy
        abandoned = threading.Event()

        def work():
            try:
                with self.lock:
                    if abandoned.is_set():   # its client gave up while it waited: nothing ran
                        return None
                    return self.pool.evaluate_many(jobs)
            finally:
                self.admitted.release()

        fut = asyncio.get_running_loop().run_in_executor(self.executor, work)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            abandoned.set()
            raise


def make_app(pool, resolve_problem: Callable[[str], Problem] | None = None,
             max_request_bytes: int = MAX_REQUEST_BYTES, max_items: int = MAX_ITEMS, timeout_s: float = TIMEOUT_S,
             max_waiting: int = 8, allow_problem_source: bool = False):
    """A FastAPI app serving `pool` (a LocalPool or a RayPool; give each pool one app).
    `resolve_problem` turns a problem name into a Problem (the CLI passes the built-in suite's
    lookup). A problem file's code runs in the judge's reference worker, which is not sandboxed
    as candidates are, so a problem_source other than a known problem's own text is taken only
    with `allow_problem_source` (trusted clients alone)."""
    if resolve_problem is None and not allow_problem_source:
        raise ValueError("make_app needs resolve_problem (problem names), allow_problem_source=True, or both")
    require()
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    class Item(BaseModel):
        model_config = ConfigDict(extra="forbid")
        problem: str | None = Field(None, description="a built-in problem's name (or the name for problem_source)")
        problem_source: str | None = Field(None, description="a KernelBench-format problem file's text")
        candidate: str = Field(description="the candidate's Python source defining ModelNew (or Model), or an "
                                           "answer with a ```python block that does")

    class Batch(BaseModel):
        model_config = ConfigDict(extra="forbid")
        items: list[Item] = Field(min_length=1, max_length=max_items)

    runner = _BatchRunner(pool, max_waiting)
    drain_bytes = DRAIN_FACTOR * max_request_bytes
    app = FastAPI(title="megakernel-gym reward service", description=__doc__)

    def refuse(code: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=code)

    def too_large(n: int, exact: bool) -> JSONResponse:
        size = f"{n:,} bytes" if exact else f"more than {max_request_bytes:,} bytes"
        return refuse(413, f"the request body is {size}; the limit is {max_request_bytes:,}. Send fewer items per "
                           "request (RewardClient splits batches to fit)")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "pool": type(pool).__name__, "backend": pool.backend, "size": getattr(pool, "size", None),
                "max_request_bytes": max_request_bytes, "max_items": max_items, "timeout_s": timeout_s}

    @app.post("/evaluate")
    async def evaluate(request: Request):
        declared = request.headers.get("content-length")
        if declared is not None and not declared.isdigit():
            return refuse(400, f"Content-Length {declared!r} is not a number of bytes")
        if declared is not None and int(declared) > drain_bytes:
            return too_large(int(declared), True)
        # Counted as it comes (a chunked body has no Content-Length) and kept only up to the limit.
        # Past it the rest is read and dropped, up to drain_bytes: a client that sends its whole
        # body before reading the answer then gets the 413, not a reset connection.
        body, seen = bytearray(), 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen <= max_request_bytes:
                body += chunk
            elif seen > drain_bytes:
                break
        if seen > max_request_bytes:
            return too_large(seen, seen <= drain_bytes)
        try:
            batch = Batch.model_validate_json(bytes(body))
        except ValidationError as e:
            errors = e.errors(include_url=False)
            if any(err["type"] == "json_invalid" for err in errors):
                return refuse(400, f"the request body is not valid JSON ({errors[0]['msg']}); send "
                                   '{"items": [{"problem": NAME, "candidate": SOURCE}, ...]}')
            where = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in errors[:5])
            return refuse(422, f"the request does not have the expected shape ({where}); send "
                               '{"items": [{"problem": NAME or "problem_source": TEXT, "candidate": SOURCE}, ...]}')
        try:
            jobs = _jobs([item.model_dump() for item in batch.items], resolve_problem, allow_problem_source)
        except ProblemError as e:
            return refuse(400, str(e))
        try:
            results = await runner.run(jobs, timeout_s)
        except _Busy:
            return refuse(503, "the judge is busy: too many batches are waiting; retry later")
        except asyncio.TimeoutError:
            return refuse(504, f"the batch did not finish within {timeout_s:.0f} s; it runs on, and its results "
                               "reach the results store")
        return {"results": [_finite(dict(r.to_dict(), reward=gated_log_speedup(r))) for r in results]}

    return app


def _finite(x):
    """JSON has no NaN or Infinity (a diverged kernel's error can be one): they go as null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _jobs(items: list[dict], resolve_problem, allow_source: bool = False) -> list[tuple[Problem, Candidate]]:
    """The request's items as (Problem, Candidate), each problem made once. ProblemError names the item."""
    problems: dict[tuple, Problem] = {}
    jobs = []
    for k, item in enumerate(items):
        name, source = item.get("problem"), item.get("problem_source")
        key = (name, source)
        if key not in problems:
            known = None
            if source is not None and name is not None and resolve_problem is not None:
                try:
                    known = resolve_problem(name)
                except (ProblemError, KeyError, ValueError):
                    known = None
            if source is not None and known is not None and known.source == source:
                problems[key] = known          # a known problem's own text (what RewardClient sends for one)
            elif source is not None:
                if not allow_source:
                    raise ProblemError(f"item {k}: this service takes no problem files (their code would run in the "
                                       "judge's reference worker, which is not sandboxed); send a known problem's "
                                       "name, or start the service with --allow-problem-source for trusted clients")
                problems[key] = _problem_or_error(k, lambda: Problem.from_source(source, name=name or "problem"))
            elif name is None:
                raise ProblemError(f"item {k}: give `problem` (a built-in problem's name) or `problem_source`")
            elif resolve_problem is None:
                raise ProblemError(f"item {k}: this service looks up no problem names; send `problem_source` "
                                   "with the problem file's text")
            else:
                problems[key] = _problem_or_error(k, lambda: resolve_problem(name))
        jobs.append((problems[key], Candidate(item["candidate"])))
    return jobs


def _problem_or_error(k: int, make: Callable[[], Problem]) -> Problem:
    try:
        return make()
    except ProblemError as e:
        raise ProblemError(f"item {k}: {e}") from e


def serve_in_thread(app, host: str = "127.0.0.1", port: int = 0):
    """Run `app` with uvicorn in a daemon thread (a trainer's own process, tests). Returns the
    server (set `.should_exit = True` to stop it), its thread and its URL."""
    import socket
    import time

    require()
    import uvicorn
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="mkgym-serve")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RewardServiceError(f"the reward service did not start on {host}:{port}")
        time.sleep(0.02)
    bound = sock.getsockname()[1]
    return server, thread, f"http://{host if ':' not in host else f'[{host}]'}:{bound}"


def serve(pool, host: str = "127.0.0.1", port: int = 8000, **app_kw) -> None:
    """Serve `pool` until interrupted (`mkgym serve`)."""
    require()
    import uvicorn
    uvicorn.run(make_app(pool, **app_kw), host=host, port=port, log_level="warning")


# -- the client ----------------------------------------------------------------------------
class RewardClient:
    """Calls a reward service. Batches are split to fit the server's request limit; an item too
    large to send on its own is a compile_error (category too_large) without a round trip."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S + 60, max_request_bytes: int | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._max_bytes = max_request_bytes

    def _call(self, method: str, path: str, body: bytes | None = None) -> Any:
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                answer = json.loads(e.read())
                detail = answer.get("error") or answer.get("detail") or e.reason
            except (ValueError, AttributeError, OSError):
                detail = e.reason
            raise RewardServiceError(f"the reward service at {self.url} refused {method} {path} (HTTP {e.code}): "
                                     f"{detail}") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RewardServiceError(f"the reward service at {self.url} did not answer {method} {path} ({reason}); "
                                     "is `mkgym serve` running there, and is the URL right?") from e

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    @property
    def max_request_bytes(self) -> int:
        if self._max_bytes is None:
            self._max_bytes = int(self.health()["max_request_bytes"])
        return self._max_bytes

    def evaluate(self, problem: str | Problem, candidate: str | Candidate) -> EvalResult:
        return self.evaluate_many([(problem, candidate)])[0]

    def evaluate_many(self, items: Sequence[tuple[str | Problem, str | Candidate]]) -> list[EvalResult]:
        """`items`: (a built-in problem's name or a Problem, the candidate's source or a Candidate)."""
        limit = self.max_request_bytes - 64   # the envelope around the items
        results: list[EvalResult | None] = [None] * len(items)
        chunk: list[tuple[int, bytes]] = []
        size = 0

        def send():
            body = b'{"items": [' + b", ".join(e for _, e in chunk) + b"]}"
            got = self._call("POST", "/evaluate", body)["results"]
            for (i, _), d in zip(chunk, got):
                results[i] = EvalResult.from_dict(d)

        for i, (problem, cand) in enumerate(items):
            item = _item(problem, cand)
            encoded = json.dumps(item).encode()
            if len(encoded) > limit:
                results[i] = EvalResult(status="compile_error", category="too_large", problem=_name(problem),
                                        backend="", candidate_sha256=sha256(item["candidate"]),
                                        reason=f"the candidate and its problem are {len(encoded):,} bytes; the "
                                               f"reward service takes at most {limit:,} per request")
                continue
            if chunk and size + len(encoded) + 2 > limit:
                send()
                chunk, size = [], 0
            chunk.append((i, encoded))
            size += len(encoded) + 2
        if chunk:
            send()
        return results  # type: ignore[return-value]


def _name(problem: str | Problem) -> str:
    return problem if isinstance(problem, str) else problem.name


def _item(problem: str | Problem, cand: str | Candidate) -> dict[str, Any]:
    source = (cand if isinstance(cand, Candidate) else Candidate(cand)).source   # the code, not the prose around it
    if isinstance(problem, str):
        return {"problem": problem, "candidate": source}
    return {"problem": problem.name, "problem_source": problem.source, "candidate": source}


def make_reward_fn(url: str, problem_column: str = "problem", reward: str = "gated_log_speedup",
                   client: RewardClient | None = None, **client_kw) -> Callable[..., list[float]]:
    """A TRL reward function scored by the reward service at `url`:
    f(prompts, completions, **columns) -> one float per completion. Each completion is read as the
    environment reads an action (the ```python block defining ModelNew; a conversational
    completion's last message); the row's `problem_column` names its built-in problem. A
    completion with no kernel gets the failure reward, as in the environment."""
    if reward not in REWARD_FUNCTIONS:
        raise ValueError(f"unknown reward {reward!r}; use one of {', '.join(REWARD_FUNCTIONS)}")
    score = REWARD_FUNCTIONS[reward]
    client = client or RewardClient(url, **client_kw)

    def reward_fn(prompts=None, completions=None, **columns) -> list[float]:
        from megakernel_gym.ir_exposure.observe import read_action   # the env's reading of an action
        problems = columns.get(problem_column)
        if problems is None:
            raise ValueError(f"the reward function needs the dataset column {problem_column!r} (a built-in problem "
                             f"name per row); this batch has: {', '.join(sorted(columns)) or 'no columns'}")
        out: list[float | None] = [None] * len(completions)
        jobs, where = [], []
        for i, (text, name) in enumerate(zip(completions, problems)):
            if isinstance(text, list):   # conversational: the assistant's message
                text = text[-1]["content"] if text else ""
            act = read_action(text, "code", max(len(text), 1) if isinstance(text, str) else 1)
            if act.kind != "code":
                why = act.why or "`submit` is not a kernel"
                out[i] = score(EvalResult(status="compile_error", reason=why, problem=str(name), backend="",
                                          candidate_sha256=sha256(str(text)), category="bad_action"))
                continue
            jobs.append((str(name), act.text))
            where.append(i)
        for i, res in zip(where, client.evaluate_many(jobs)):
            out[i] = score(res)
        return out  # type: ignore[return-value]

    reward_fn.__name__ = f"mkgym_{reward}"   # TRL logs each reward function under its name
    reward_fn.client = client  # type: ignore[attr-defined]
    return reward_fn


__all__ = ["make_app", "serve", "require", "serve_in_thread", "RewardClient", "RewardServiceError", "make_reward_fn",
           "MAX_REQUEST_BYTES", "TIMEOUT_S"]
