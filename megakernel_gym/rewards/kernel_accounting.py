"""What the GPU ran during a candidate's call, named and accounted (rewards/sandbox.py's candidate role uses
it): the judge's own stream, the kernels a call may launch besides the candidate's (fills, copies, the
judge's sleep), and `KernelSession`, which records every kernel a timed call ran and flags those that are
neither the candidate's own nor allowed (vendor library kernels, torch's compute).
"""
from __future__ import annotations

import re

# Kernel names that belong to vendor libraries, not to the candidate.
# (Not at::native: allowed ops such as torch.zeros or .contiguous() launch those.)
LIBRARY_KERNEL_PATTERNS = ("gemm", "cublas", "cudnn", "cutlass", "xmma", "sgemm", "hgemm", "gemv", "splitkreduce")


_JUDGE_STREAM: list = []


def judge_stream(torch):
    """The worker's own CUDA stream for the judge's work between calls (inputs, L2 flush): a kernel on it
    is the judge's, any other kernel in a session is the candidate's or an allowed call's."""
    if not _JUDGE_STREAM:
        _JUDGE_STREAM.append(torch.cuda.Stream())
    return _JUDGE_STREAM[0]


# Kernels that allowed calls launch on the candidate's behalf, by the at::native function that names them:
# the fill behind torch.zeros/full/fill_ (and the judge's poisoning of fresh allocations), the copy behind
# .contiguous()/.clone()/.to()/copy_, torch.cat's batched copy, torch.arange; and the judge's spin kernel in
# front of each timed call (torch.cuda._sleep). Accounted as those calls', not as foreign compute.
ALLOWED_CALL_KERNELS = re.compile(r"\bat::native::.*(?:FillFunctor|direct_copy_kernel|copy_kernel|"
                                  r"CatArrayBatchedCopy|arange_cuda_out|float8_copy_kernel)|"
                                  r"^(?:void )?(?:at::cuda::(?:\(anonymous namespace\)::)?)?spin_kernel\b")


def _own_kernel_names(counter) -> set[str]:
    """The kernels the candidate launched itself (sandbox.LaunchCounter), Triton's and NVRTC modules'."""
    own = set(counter.kernel_names)
    for m in list(counter.nvrtc._modules.values()):
        own.update(m.kernel_names)
    return own


def classify_kernels(kernels, own: set[str]) -> tuple[list[str], list[str]]:
    """(library, foreign): kernels that ran but were not compiled by the judge from the candidate's source
    (matched by their function's own identifier, never by a pattern a vendor name could share) and are not
    an allowed call's (ALLOWED_CALL_KERNELS). Vendor libraries' (cuBLAS, cuDNN, CUTLASS) are named apart."""
    library, foreign = [], []
    for k in kernels:
        low = k.lower()
        vendor = any(v in low for v in _VENDOR_NAMESPACES)
        if k in own or not vendor and _function_name(k) in own and not _TORCH_NAMESPACES.search(k):
            continue   # a Triton or extern "C" kernel by its whole name; a C++ one by its identifier, never
            # one in torch's namespaces (a candidate's no-op `elementwise_kernel` excuses none of aten's)
        if not vendor and ALLOWED_CALL_KERNELS.search(k):
            continue
        (library if vendor or any(p in low for p in LIBRARY_KERNEL_PATTERNS) else foreign).append(k)
    return library, foreign


class KernelSession:
    """GPU activity records (CUPTI, through torch.profiler) over a whole phase: every kernel that ran while
    the candidate's calls did, with its stream. Kernels on the judge's stream are the judge's; every other
    one must be the candidate's own or an allowed call's (classify_kernels). One session spans all of a
    phase's calls, checked or timed alike, so no call of the candidate's runs outside one."""

    def __init__(self, torch, side):
        self.torch, self.side = torch, side
        self.kernels: dict[str, int] = {}
        self.streams: set[int] = set()

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile
        torch = self.torch
        torch.cuda.synchronize()
        self.prof = profile(activities=[ProfilerActivity.CUDA])
        self.prof.__enter__()
        with torch.cuda.stream(self.side):   # the first kernel of the session marks the judge's stream
            torch.cuda._sleep(1)
        torch.cuda.synchronize()
        return self

    def __exit__(self, *exc):
        torch = self.torch
        torch.cuda.synchronize()
        self.prof.__exit__(*exc)
        events = []
        for ev in self.prof.profiler.kineto_results.events():
            if ev.device_type() != torch.autograd.DeviceType.CUDA:
                continue
            name = ev.name()
            if not name or "memcpy" in name.lower() or "memset" in name.lower():
                continue
            start = ev.start_ns() if hasattr(ev, "start_ns") else ev.start_us() * 1000
            events.append((start, name, int(ev.device_resource_id())))
        events.sort()
        judge = events[0][2] if events else None
        for _, name, stream in events[1:]:
            if stream == judge:
                continue
            self.kernels[name] = self.kernels.get(name, 0) + 1
            self.streams.add(stream)
        return False

    def flags(self, own: set[str], launched: bool) -> list[dict]:
        """Rejections for what ran. `launched`: the candidate's calls launched kernels of their own, so the
        records must show some; none means the records cannot be trusted, which is a rejection too."""
        out = []
        if launched and not self.kernels:
            out.append({"rule": "accounting", "detail": "the GPU's activity records show no kernel of a call that "
                        "launched kernels: the judge cannot account for what ran"})
        library, foreign = classify_kernels(self.kernels, own)
        if library:
            out.append({"rule": "forbidden_library", "detail": "library kernels ran: " + ", ".join(library[:5])})
        if foreign:
            out.append({"rule": "foreign_kernel", "detail": "kernels the judge did not compile from the "
                        "candidate's source ran: " + ", ".join(k[:200] for k in foreign[:5])})
        if len(self.streams) > 1:
            out.append({"rule": "concurrency", "detail": f"kernels ran on {len(self.streams)} streams"})
        return out


_VENDOR_NAMESPACES = ("cutlass", "cublas", "cudnn", "xmma", "cute::")
_TORCH_NAMESPACES = re.compile(r"\b(?:at|c10|cub|thrust|torch)::|\(anonymous namespace\)")


def _function_name(kernel: str) -> str:
    """A profiled kernel's own identifier: `void ns::gemm_tile<float, 64>(float const*, ...)` -> gemm_tile.
    The candidate's kernels are excused from the library-name rule by this name alone, exactly (a
    candidate kernel named `gemm` must not excuse a cuBLAS `sm90_xmma_gemm_...`)."""
    head = kernel.split("(", 1)[0]
    depth, cut = 0, len(head)
    for i, c in enumerate(head):   # drop template arguments, nested ones included
        if c == "<":
            if depth == 0:
                cut = min(cut, i)
            depth += 1
        elif c == ">":
            depth -= 1
    head = head[:cut].strip()
    return head.split()[-1].split("::")[-1] if head else ""
