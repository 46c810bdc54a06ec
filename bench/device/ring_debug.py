"""Device debugging aid for the weight ring: one model, one schedule, one weights path, one run."""
import sys
import torch
from megakernel_gym.compiler import ZOO, capture, module_tensors, run_graph
from megakernel_gym.compiler.runtime import Megakernel
from megakernel_gym.ir_exposure import apply_edits, make_ir, tuned_edits
from megakernel_gym.policies.expert import expert_edits

name, sched, weights = sys.argv[1], sys.argv[2], sys.argv[3]
dev = "cuda" if name.endswith("1b") else "cpu"
model, inputs = ZOO[name](seed=0, device=dev)
g = capture(*ZOO[name](device="meta"), name) if dev == "cuda" else capture(model, inputs, name)
params, feeds = module_tensors(model), dict(zip(g.inputs, inputs))
base = make_ir(g, num_sms=132 if dev == "cuda" else 8)
ir = {"default": lambda: base, "tuned": lambda: apply_edits(base, tuned_edits(base)),
      "expert": lambda: apply_edits(base, expert_edits(base))}[sched]()
mk = Megakernel(ir.plan(), impls=ir.impls, weights=weights)
print(name, sched, weights, "stages", mk.table.ws_stages, "smem", mk.table.smem_bytes, flush=True)
out = mk.run(params, feeds)
if dev == "cpu":
    ref = run_graph(g, params, feeds)
    for k, v in ref.items():
        print(k, float((out[k].cpu().float() - v.float()).abs().max()))
else:
    print({k: bool(torch.isfinite(v.float()).all()) for k, v in out.items()})
print("OK")
