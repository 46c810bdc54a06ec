"""Codegen: a validated Plan -> CUDA C for one persistent megakernel (stage 1: correct, simple).

    source, table = emit_cuda(plan)        # readable CUDA C + the task table the runtime uploads

One thread block per SM queue runs its tasks in order. Before a task, the lanes of warp 0 spin
on the counters it waits for, side by side (ld.acquire.gpu), each with a spin budget; past the budget the kernel records
(task, counter) in `status` and traps, so a bad schedule ends in an error, never a hung GPU.
After a task, the block syncs and thread 0 publishes with a fence and an atomic add to each
counter the task produces into. Fused producers run first, inside the consumer's task, over
the box of their output the consumer reads (written to their global buffer, then read back
by the same block: correct, if not yet on chip).

Every op becomes a device function over [lo, hi) along its tile axis, with shapes, strides
and dtypes as constants and its tensors as slot arguments, so ops alike in all but their tensors
(the same projection in 16 layers) share one function. Tensors live in one pointer table `T` (views alias their base; a
cache_write's output aliases its cache). bf16 is handled as raw 16-bit words converted by
hand (round to nearest even), so no CUDA header is needed and NVRTC compiles it anywhere.
Arithmetic is float32 throughout, as the graph's reference ops do.

Speed comes later (issue: 16-byte loads, several loads in flight, prefetch); this stage is
what the differential tests on the GPU check first.

The package, in the order one emit_cuda call runs through it:
    knobs.py        the knobs, the kernel's fixed sizes, Build (the checked knobs); a switch such as
                    knobs.X_PLANES is set on knobs itself (the package does not copy it)
    layout.py       the task table, tensors' bases and which bodies a plan's ops can take
    emitter.py      _Emitter: a plan's device functions; the bodies are in
      matmul.py, elementwise.py, attention.py  (mixins of _Emitter, one op family each)
    impl.py         `impl` bodies: the contract, the check, the preamble
    templates.py    the CUDA text around the bodies (prelude, weight ring, main loop)
    emit.py         emit_cuda and its steps (_emit, _emit_once)
"""
from __future__ import annotations

from megakernel_gym.compiler.codegen.knobs import (  # noqa: F401
    THREADS, WARPS, MK_CLAIMED, MK_CLAIM_AGAIN, KV_PRE_MAX, SMEM_LIMIT,
    PREFETCH_CHUNK, WS_SEG, WS_STAGE, WS_MAX_STAGES, WS_L2_AHEAD, INFLIGHT,
    MAX_INFLIGHT, MAX_AHEAD, X_BF16, CONTROL_WARP, SMEM_BLOCK,
    WEIGHT_PATHS, COMBINES, PRODUCERS, MAXNREGS, MAXNREG, SIGNALS,
    CTYPES, LL_CTYPES, EPV, ESIZE, CodegenError, KV_PREFETCHES,
    RING_L2, RING_L2_DEFAULT, V_PREFETCHES, STEP_INPUTS, parse_hold_ops, parse_l2_idle,
    Build,
)
from megakernel_gym.compiler.codegen.layout import (  # noqa: F401
    _streams, onchip_norm_problem, attention_split_problem, TaskTable, attention_inputs,
)
from megakernel_gym.compiler.codegen.impl import (  # noqa: F401
    IMPL_CONTRACT, impl_code_problem,
)
from megakernel_gym.compiler.codegen.elementwise import (  # noqa: F401
    ElementwiseBodies,
)
from megakernel_gym.compiler.codegen.matmul import (  # noqa: F401
    ring_packed, MatmulBodies,
)
from megakernel_gym.compiler.codegen.attention import (  # noqa: F401
    AttentionBodies,
)
from megakernel_gym.compiler.codegen.emitter import (  # noqa: F401
    _Emitter,
)
from megakernel_gym.compiler.codegen.templates import (  # noqa: F401
    PROBE_WORDS, PROBE_NAMES, PREFETCH_MODES,
)
from megakernel_gym.compiler.codegen.emit import (  # noqa: F401
    emit_cuda, epilogue_ops, function_calls, function_table,
)

__all__ = ["CodegenError", "TaskTable", "emit_cuda", "THREADS", "PRODUCERS", "PREFETCH_MODES", "WEIGHT_PATHS", "IMPL_CONTRACT",
           "impl_code_problem", "SMEM_LIMIT", "onchip_norm_problem", "epilogue_ops", "attention_split_problem"]
