"""One NVRTC compile, in this process or as a process of its own (cuda/nvrtc.py compile_program
with timeout_s): a compile of agent code runs where a hang is ended by a time limit and a crash
ends only that process.

Standalone on purpose: the child process loads this file by path, so that it imports nothing but
NVRTC's bindings (the package's own imports cost a second per compile). Protocol: a JSON job on
stdin ({source, name, opts, headers, names}), one JSON answer on stdout ({ok, cubin (base64),
lowered} or {ok: false, log}); nothing else is trusted from the child.
"""
from __future__ import annotations

import base64
import json
import sys


class NvrtcFailed(Exception):
    """NVRTC refused the source; args[0] is its log."""


def nvrtc_compile(source: str, name: str, opts: list[str], headers: dict[str, str],
                  names: tuple[str, ...]) -> tuple[bytes, dict[str, str]]:
    """The cubin and each name expression's lowered symbol; NvrtcFailed(log) when NVRTC refuses."""
    from cuda.bindings import nvrtc

    def check(result):
        err = result[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC call failed: {err}")
        return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

    hnames = sorted(headers)
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), len(hnames),
                                          [headers[h].encode() for h in hnames], [h.encode() for h in hnames]))
    try:
        for expr in names:
            check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log_size = check(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * log_size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.decode(errors="replace").rstrip("\0 \n")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcFailed(log_text or str(err))
        size = check(nvrtc.nvrtcGetCUBINSize(prog))
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        lowered = {}
        for expr in names:
            low = check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
            lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin, lowered


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    import resource
    # the parent's wall-clock limit kills this process; these bound it from inside as well (CPU time,
    # address space, no core file)
    if job.get("cpu_s"):
        resource.setrlimit(resource.RLIMIT_CPU, (int(job["cpu_s"]), int(job["cpu_s"])))
    if job.get("memory_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (int(job["memory_bytes"]), int(job["memory_bytes"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        cubin, lowered = nvrtc_compile(job["source"], job["name"], list(job["opts"]), dict(job["headers"]),
                                       tuple(job["names"]))
        answer = {"ok": True, "cubin": base64.b64encode(cubin).decode(), "lowered": lowered}
    except NvrtcFailed as e:
        answer = {"ok": False, "log": str(e.args[0])}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
