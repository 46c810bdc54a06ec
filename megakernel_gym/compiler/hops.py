"""Hops: how a megakernel task learns that its inputs are there.

Counters (the plan's waits, schedule.build_plan): a producer task's block syncs, its control warp
fences and adds 1 to the task's counter; a consumer's control warp polls the counter, then the
task loads its input. Under a decode step's load each of those is a trip through a busy L2: on an
H100 the fence alone took 1.5-2.5 us per task of the 1B expert (bench/task_probe.py).

LL words (the idea of NCCL's low-latency protocol: the flag travels with the data): a bf16
activation is kept as one 4-byte word per element, the value in the low half and the launch's
epoch in the high half (a float32 one as 8 bytes, a word each), written by one store. A reader polls the words it reads until they carry
this launch's epoch, which is one trip: no fence, no counter, no second load.

Measured on an H100 (the 1B expert, bench/task_probe.py --codegen hops=ll): the fences go (task
tails 1.3-2.5 us -> 0.2-0.3 us) and 81,024 waits become 1,024 (attention's on the KV caches). With
thread 0 issuing the weight ring's copies the step was about 6% slower (1,225 -> 1,301 us in one
run): what a task saved at its end, its readers spent polling. With the producer warp it is 4.5%
faster (1,167 -> 1,117 us, bench/results/ab_knobs_kv_fused.json), since there the fence also waited
for the ring's bulk copies in flight. So emit_cuda takes "ll" with the producer warp, counters
with thread 0.

This module decides, for codegen, which tensors can be LL words (ll_tensors) and which waits they
make redundant (kept_waits). The plan is not changed: the validator and the CPU VM see the same
dependencies, and the megakernel enforces each of them either by a counter or by the LL words of
the data itself.
"""
from __future__ import annotations

from megakernel_gym.compiler.schedule import Plan
from megakernel_gym.compiler.tasks import Task

HOPS = ("ll", "counters")
# bytes of an element's LL word: bf16 + a 16-bit epoch, float32 + a 32-bit word for the epoch
LL_WORD_BYTES = {"bfloat16": 4, "float32": 8}
LL_DTYPES = tuple(LL_WORD_BYTES)
# accesses that read or write each element once per task: a poll per element costs one trip, where
# a body that reads the same element many times (a generic matmul's x) would poll it each time
ONCE = frozenset({"stage", "store", "load elementwise", "load rope", "load cache_write"})


def ll_tensors(plan: Plan, access: dict[str, set[str]], base: dict[str, str], called: set[str]) -> frozenset[str]:
    """Base tensors that can be LL words, from how one emission of the plan reached each tensor
    (`access`: _Emitter.access). Each one is a bf16 or float32 activation (no graph input, output, buffer or
    weight: nothing outside the kernel reads or writes it) that the kernel reaches only by element
    loads, stores and staging that touch each element once per task; exactly one op writes it, in
    that op's own tasks (`called`: ops that fused consumers also run, which would write it again),
    and those tasks write every element of it, since a reader polls until each word it reads is this
    launch's."""
    g, tg = plan.tg.graph, plan.tg
    writers: dict[str, list[str]] = {}
    for op in g.ops:
        if op.kind != "view":
            for t in op.outputs:
                writers.setdefault(base[t], []).append(op.name)
    out = set()
    for b, how in access.items():
        spec = g.tensors[b]
        if spec.kind != "activation" or spec.dtype not in LL_DTYPES or not how <= ONCE or "store" not in how:
            continue
        w = writers.get(b, [])
        if len(w) != 1 or w[0] in called or not tg.by_op.get(w[0]):
            continue
        numel = 1
        for d in spec.shape:
            numel *= d
        spans = sorted(s for tid in tg.by_op[w[0]] for r in tg.tasks[tid].writes if r.tensor == b for s in r.spans)
        end = 0
        for lo, hi in spans:
            if lo > end:
                break
            end = max(end, hi)
        if end == numel:
            out.add(b)
    return frozenset(out)


def _ll_only(t: Task, p: Task, ll: frozenset[str]) -> bool:
    """Whether task t depends on p only by reading LL words p writes: no write of t touches what p
    reads or writes, and every overlap of t's reads with p's writes is on an LL tensor."""
    if any(w.overlaps(x) for w in t.writes for x in p.writes + p.reads):
        return False
    return all(r.tensor in ll for r in t.reads for w in p.writes if r.overlaps(w))


def kept_waits(plan: Plan, ll: frozenset[str]) -> dict[int, list[tuple[int, int]]]:
    """The plan's waits less those that LL words enforce already: a wait goes when every task it
    waits for (the counter's producers the task depends on) is a dependency by LL words alone.
    _ll_only walks spans; most pairs are settled by which base tensors the two tasks read and write, which
    is the same for every tile of an op, so that is asked once per pair of such classes (a 1B plan asks
    1.6M pairs: the spans were most of emit_cuda's time)."""
    if not ll:
        return plan.waits
    tg = plan.tg
    out = {}
    sets: list[tuple[frozenset[str], frozenset[str]]] = []     # a class: the base tensors its tasks read, write
    classes: dict[tuple[frozenset[str], frozenset[str]], int] = {}
    class_of: dict[int, int] = {}
    quick: dict[tuple[int, int], bool | None] = {}

    def klass(tid: int) -> int:
        k = class_of.get(tid)
        if k is None:
            task = tg.tasks[tid]
            key = (frozenset(r.tensor for r in task.reads), frozenset(w.tensor for w in task.writes))
            k = class_of[tid] = classes.setdefault(key, len(classes))
            if k == len(sets):
                sets.append(key)
        return k

    def settled(kt: int, kp: int) -> bool | None:
        """True: an LL dependency whatever the spans; None: the spans decide."""
        (t_reads, t_writes), (p_reads, p_writes) = sets[kt], sets[kp]
        if t_writes & (p_writes | p_reads):
            return None
        return True if (t_reads & p_writes) <= ll else None

    for t, waits in plan.waits.items():
        task, deps = tg.tasks[t], tg.deps[t]
        kt = klass(t)
        kept = []
        for c, threshold in waits:
            prods = [p for p in plan.counters[c].producers if p in deps]
            ok = bool(prods)
            for p in prods:
                kp = klass(p)
                q = quick.get((kt, kp), 0)
                if q == 0:
                    q = quick[(kt, kp)] = settled(kt, kp)
                if q is None and not _ll_only(task, tg.tasks[p], ll):
                    ok = False
                    break
            if not ok:
                kept.append((c, threshold))
        out[t] = kept
    return out


__all__ = ["HOPS", "LL_DTYPES", "LL_WORD_BYTES", "ONCE", "ll_tensors", "kept_waits"]
