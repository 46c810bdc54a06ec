"""Device-side debugging of the Mixtral level-5 problem: each step of the judge's setup in one process, with tracebacks."""
import copy
import importlib
import sys
import traceback

import torch

sys.path.insert(0, ".")
from megakernel_gym.compiler import capture, module_tensors  # noqa: E402
from megakernel_gym.compiler.runtime import Megakernel, time_us  # noqa: E402
from megakernel_gym.compiler.zoo import make_block, step_config  # noqa: E402
from megakernel_gym.ir_exposure import make_ir  # noqa: E402

mod = importlib.import_module("megakernel_gym.curriculum.problems.mk_mixtral_moe")
cfg = step_config(mod.block, mod.config)
g = capture(*make_block(mod.block, cfg, device="meta"), "m")
ir0 = make_ir(g, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
print("tasks", len(ir0.plan().tg.tasks), flush=True)
model, inputs = make_block(mod.block, cfg, seed=0, device="cuda")
print("built; memory GB", torch.cuda.memory_allocated() / 1e9, flush=True)
try:
    with torch.no_grad():
        ref = model(*inputs)
        truth = copy.deepcopy(model).float()(*inputs)
    print("eager ok", float((ref.float() - truth).norm() / truth.norm()), flush=True)
    mk = Megakernel(ir0.plan())
    print("compiled", flush=True)
    launch = mk.bind(module_tensors(model), dict(zip(g.inputs, inputs)))
    launch()
    launch.check()
    out = launch.outputs()[g.outputs[0]]
    print("megakernel err", float((out.float() - truth).norm() / truth.norm()), flush=True)
    print(time_us(launch, 20), flush=True)
except Exception:
    traceback.print_exc()
