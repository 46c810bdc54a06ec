"""The generated CUDA stays byte for byte what it was (issue 42: codegen is restructured with no behaviour
change). For every zoo model under the default, tuned and expert schedules at 132 SMs, and for the expert
1B and tiny Llama under one non-default value of each emit_cuda knob, the megakernel's source and its task
table hash to what tests/data/codegen_sha256.json recorded.

A deliberate change to the generated code rewrites the record (and says so in its commit):

    python tests/test_codegen_identity.py --write
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parent / "data" / "codegen_sha256.json"
SCHEDULES = ("default", "tuned", "expert")
# one non-default value of each emit_cuda knob (applied to the expert 1B and tiny Llama)
KNOBS: dict[str, dict] = {
    "weights=regs": {"weights": "regs"},
    "stream=global": {"stream": "global"},
    "ring_stages=2": {"ring_stages": 2},
    "l2_ahead=3": {"l2_ahead": 3},
    "l2_wait=4": {"l2_wait": 4},
    "probes": {"probes": True},
    "hops=counters": {"hops": "counters"},
    "hops=ll,producer=thread": {"hops": "ll", "producer": "thread"},
    "combine=reader": {"combine": "reader"},
    "producer=thread": {"producer": "thread"},
    "signal=release": {"signal": "release"},
    "kv_prefetch=wait": {"kv_prefetch": "wait"},
    "kv_prefetch=ahead": {"kv_prefetch": "ahead"},
    "ll_poll_ns=400": {"ll_poll_ns": 400},
    "v_prefetch=l1": {"v_prefetch": "l1"},
    "step_inputs=calls": {"step_inputs": "calls"},
    "prefetch_mode=lines": {"prefetch_mode": "lines"},
    "distinct_ops=attn": {"distinct_ops": "attn"},
    "kv_pre=4": {"kv_pre": 4},
    "impl": {"impls": {"layers.0.mlp.add": "for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = in0[i] + in1[i];"}},
    "x_bf16=False": {"x_bf16": False},
    "ring_l2=normal": {"ring_l2": "normal"},
    "maxnreg=0": {"maxnreg": 0},
    "inflight_ops=mlp:3": {"inflight_ops": "mlp:3"},
    "l2_idle=silu_mul:2": {"l2_idle": r"mlp\.silu_mul$:2"},
    "claim=mlp.add": {"claim": r"mlp\.add$"},
}
KNOB_MODELS = ("llama-tiny", "llama-1b")


def _digest(src: str, table) -> str:
    h = hashlib.sha256(src.encode())
    h.update(repr(dataclasses.asdict(table)).encode())
    return h.hexdigest()


def _irs() -> dict:
    from megakernel_gym.compiler import ZOO, capture
    from megakernel_gym.ir_exposure import make_ir
    out = {}
    for name in ZOO:
        model, inputs = ZOO[name](device="meta") if name.endswith("-1b") else ZOO[name]()
        out[name] = make_ir(capture(model, inputs, name), num_sms=132)
    return out


def digests() -> dict[str, str]:
    """{case: sha256 of the source and task table, or the error emit_cuda raised}."""
    from megakernel_gym.compiler.codegen import emit_cuda
    from megakernel_gym.ir_exposure import apply_edits, tuned_edits
    from megakernel_gym.policies.expert import expert_edits
    out: dict[str, str] = {}
    for name, ir in _irs().items():
        plans = {"default": ir.plan(), "tuned": apply_edits(ir, tuned_edits(ir)).plan(),
                 "expert": apply_edits(ir, expert_edits(ir)).plan()}
        for sched, plan in plans.items():
            out[f"{name}/{sched}"] = _digest(*emit_cuda(plan))
        if name in KNOB_MODELS:
            for label, knobs in KNOBS.items():
                try:
                    out[f"{name}/expert/{label}"] = _digest(*emit_cuda(plans["expert"], **knobs))
                except Exception as e:      # a knob a plan refuses must keep refusing it, the same way
                    out[f"{name}/expert/{label}"] = f"{type(e).__name__}: {e}"
    return out


@pytest.fixture(scope="module")
def now() -> dict[str, str]:
    return digests()


def test_the_record_covers_every_zoo_model_schedule_and_knob(now):
    from megakernel_gym.compiler import ZOO
    record = json.loads(RECORD.read_text())
    assert set(record) == set(now), sorted(set(record) ^ set(now))
    assert len(now) == 3 * len(ZOO) + len(KNOB_MODELS) * len(KNOBS)
    # the knobs reach the code: each changes the expert 1B's source, or is refused by it
    base = now["llama-1b/expert"]
    assert all(now[f"llama-1b/expert/{k}"] != base for k in KNOBS), \
        [k for k in KNOBS if now[f"llama-1b/expert/{k}"] == base]


def test_generated_cuda_is_byte_identical_to_the_record(now):
    record = json.loads(RECORD.read_text())
    changed = sorted(k for k in record if now.get(k) != record[k])
    assert not changed, f"generated CUDA changed for {len(changed)} cases (first: {changed[:5]}); " \
                        "if deliberate, rewrite the record: python tests/test_codegen_identity.py --write"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_codegen_identity.py --write")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}")
