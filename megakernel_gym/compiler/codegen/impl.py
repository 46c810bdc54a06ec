"""`impl` bodies: the contract an agent's task body is written to (IMPL_CONTRACT), the check that refuses
a body before it reaches the kernel (impl_code_problem, through compiler/impl_guard.py), and the
preamble and name check for a kernel that carries bodies.
"""
from __future__ import annotations


from megakernel_gym.compiler.codegen.knobs import CodegenError, SMEM_LIMIT, THREADS, WARPS


IMPL_CONTRACT = f"""\
An impl body is CUDA C that computes one task: the tile [lo, hi) of the op's output along its tile
axis (every other axis whole; `part` is 0), run by all {THREADS} threads of the SM's block (blockDim.x; use
__syncthreads() freely, by every thread alike). In scope: in0, in1, ... (the op's inputs, in the order the
IR's in= lists them, read-only) and out (the output), elements typed float / unsigned short (bf16 bits) /
long long / int by dtype, each with its shape as inN_shape[] / out_shape[] (row-major, contiguous); lo, hi;
tile_axis; sm ({SMEM_LIMIT // 4} floats of shared memory); helpers bf2f(u16) -> float, f2bf(float) -> u16,
warp_sum, warp_max, block_sum(v, red) with red a __shared__ float[{WARPS}]; INFINITY, NAN.
Memory is reached by index only: in0[i], out[i], sm[i] and arrays the body declares (float acc[4];
__shared__ float red[{WARPS}];). Every index is checked on the GPU: out[i] only inside the task's tile, in0[i]
inside its tensor, an array inside its extent; an index out of range is an error naming the op.
Not allowed (refused at edit time, however spelled: digraphs, trigraphs, line splices count): preprocessor
lines, _Pragma and ## pasting, string literals, pointers (&x, *p, float*, casts to pointer or reference
types, an array or tensor used without its index, ->), asm, static or extern storage, new functions, types
or templates, timers, sleeps, traps, compiler intrinsics (__builtin_*, __nvvm_*), malloc/new/printf, and the
kernel's own tables and helpers (T, S, counters, mk_*). The cpu and sim backends compile a body but never
run it: a plan with impl bodies is scored (status not_run) on the gpu backend only."""


def impl_code_problem(code: str) -> str | None:
    """Why an impl body may not go into the megakernel, or None: the body read as the C
    preprocessor reads it and checked as tokens (compiler/impl_guard.py says what and why)."""
    from megakernel_gym.compiler.impl_guard import impl_code_problem as problem
    return problem(code)


def _impl_preamble() -> str:
    from megakernel_gym.compiler.impl_guard import PREAMBLE
    return PREAMBLE.replace("@WARPS@", str(WARPS))


def _check_impl_names(source: str, impls: dict[str, str]) -> None:
    """No body names what the generated source declares at file scope (its tables, helpers, macros,
    shared variables) beyond the contract's helpers: the rules that need the source."""
    from megakernel_gym.compiler.impl_guard import own_name_problem
    from megakernel_gym.compiler.impl_guard import file_scope_names
    names = file_scope_names(source)
    for name, code in impls.items():
        problem = own_name_problem(code, names)
        if problem:
            raise CodegenError(f"impl {name}: {problem}")
