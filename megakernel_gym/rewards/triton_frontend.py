"""On the cpu backend a kernel runs under Triton's CPU interpreter only if Triton's own GPU compiler takes it.

The interpreter runs a @triton.jit body as Python, so Python can see what a GPU compile never lets it see: red
team 26 turned each kernel value into a Python int with len(range(v)), or by bisection with `A if v > t else B`
(the interpreter's tensors answer __index__ and __bool__), and computed a softmax with math.exp that scored
correct. A GPU compile refuses both (a tensor is not a Python int, nor a bool, at compile time). Rules on the
body's text catch the forms someone has thought of; Triton's front end (AST to TTIR, the first stage of every
GPU compile) is the definition of what a kernel may say. It runs without a GPU: each launch's kernel, with the
launch's own argument types and constexprs, goes through it for an sm_90 target before its body runs, and a
refusal is the GPU's compile error. The answer is kept per (function, specialization).

The kernel's body is the one the interpreter runs and the rules read: its definition from the file's syntax
tree (triton_cpu.own_definition). Under TRITON_INTERPRET=1 every @triton.jit function, Triton's own library
(tl.zeros, tl.max...) included, is an InterpretedFunction; the front end sees each as the JITFunction a GPU
run would have made of it.
"""
from __future__ import annotations

import ast
from typing import Any

_CACHE_LIMIT = 512   # specializations kept per worker; a kept worker judges many candidates


class TritonCompilationError(RuntimeError):
    """A launched kernel that Triton's GPU front end refuses (the judge files it as a compile_error)."""


class FrontEnd:
    """Triton's front end for one sm_90 target, and the specializations it has taken."""

    def __init__(self, interpreter, own_definition, triton_own):
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.compiler import ASTSource
        from triton.compiler import code_generator
        from triton.runtime.jit import JITFunction, create_function_from_signature
        self.interpreter = interpreter
        self.target = GPUTarget("cuda", 90, 32)
        self.backend = CUDABackend(self.target)
        self.ASTSource, self.code_generator = ASTSource, code_generator
        self.create_binder = create_function_from_signature
        self.passed: dict[tuple, bool] = {}
        self.jit_fns: dict[Any, Any] = {}
        front = self

        class AsJit(JITFunction):
            """A function the interpreter holds, as the JITFunction a GPU run would have compiled."""

            @property
            def cache_key(self):
                # Triton hashes a function's dependencies through its raw globals, where the interpreter's functions
                # are (and refused); nothing here is cached by it, so a key of its own does
                return f"mkgym-front-end-{id(self)}"

            def get_capture_scope(self):
                return {k: front.as_jit(v) for k, v in super().get_capture_scope().items()}

            def parse(self):
                if triton_own(self.fn.__code__.co_filename):
                    return super().parse()
                node = own_definition(self.fn)
                node.decorator_list = []
                ast.increment_lineno(node, 1 - node.lineno)   # as Triton numbers it: the def is line 1
                return ast.Module(body=[node], type_ignores=[])
        self.AsJit = AsJit

        base = code_generator.CodeGenerator

        class Generator(base):
            """Triton's code generator, seeing the interpreter's functions (a module's attribute: tl.zeros,
            tl.max) as JITFunctions."""

            def visit_Attribute(self, node):
                return front.as_jit(super().visit_Attribute(node))
        self.Generator = Generator

    def as_jit(self, value):
        if not isinstance(value, self.interpreter.InterpretedFunction):
            return value
        return self.jit_of(value.fn)

    def jit_of(self, fn):
        jf = self.jit_fns.get(fn)
        if jf is None:
            if len(self.jit_fns) > _CACHE_LIMIT:
                self.jit_fns.clear()
            jf = self.jit_fns[fn] = self.AsJit(fn)
        return jf

    def check(self, fn, args: tuple, kwargs: dict) -> None:
        """Raise TritonCompilationError unless Triton's GPU front end takes `fn` launched with these arguments."""
        jf = self.jit_of(fn)
        binder = getattr(jf, "_mkgym_binder", None)
        if binder is None:
            binder = jf._mkgym_binder = self.create_binder(jf.signature, jf.params, self.backend)
        try:
            bound, specialization, options = binder(*args, **kwargs)
        except TypeError as e:
            raise TritonCompilationError(f"the kernel {fn.__name__} cannot take its launch's arguments: {e}") from None
        key = (fn, repr(specialization), repr(sorted(options.items())))
        if key in self.passed:
            return
        try:
            options, signature, constexprs, attrs = jf._pack_args(self.backend, kwargs, bound, specialization,
                                                                   options)
            # a jit function passed as a constexpr (an activation) is the interpreter's; the GPU's is a JITFunction
            constexprs = {k: self.as_jit(v) for k, v in constexprs.items()}
            from triton._C.libtriton import ir
            ctx = ir.context()
            ir.load_dialects(ctx)
            self.backend.load_dialects(ctx)
            src = self.ASTSource(jf, signature, constexprs, attrs)
            self.code_generator.CodeGenerator = self.Generator
            try:
                src.make_ir(self.target, options, self.backend.get_codegen_implementation(options),
                            self.backend.get_module_map(), ctx)
            finally:
                self.code_generator.CodeGenerator = self.Generator.__mro__[1]
        except Exception as e:
            msg = str(e).strip() or type(e).__name__
            lines = [ln for ln in msg.splitlines() if ln.strip()]
            where = lines[0].rstrip(":") if len(lines) > 1 and lines[0].startswith("at ") else ""
            raise TritonCompilationError(
                f"Triton's GPU compiler refuses the kernel {fn.__name__} as launched ({lines[-1].strip()}"
                f"{', ' + where + ' of its def' if where else ''}); on the cpu backend a kernel runs under the "
                f"interpreter only if a GPU compile (Triton's front end, for sm_90) takes it:\n{msg}") from None
        if len(self.passed) > _CACHE_LIMIT:
            self.passed.clear()
        self.passed[key] = True
