"""Proposed-fix probe: run Triton's GPU frontend (AST -> TTIR, no GPU needed) on a candidate's kernel."""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.backends.nvidia.compiler import CUDABackend
spec = importlib.util.spec_from_file_location("cand", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
fn = m._k
sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"}
src = ASTSource(fn, sig, constexprs={(3,): 512})
target = GPUTarget("cuda", 90, 32)
backend = CUDABackend(target)
opts = backend.parse_options({})
from triton._C.libtriton import ir
ctx = ir.context(); ir.load_dialects(ctx); backend.load_dialects(ctx)
codegen_fns = backend.get_codegen_implementation(opts)
try:
    mod = src.make_ir(target, opts, codegen_fns, backend.get_module_map(), ctx)
    print(sys.argv[1], "frontend OK")
except Exception as e:
    print(sys.argv[1], "frontend REFUSED:", type(e).__name__, str(e).splitlines()[-1][:200] if str(e) else "")
