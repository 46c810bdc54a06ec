"""On the cpu backend a kernel runs under Triton's CPU interpreter only if Triton's own GPU compiler takes it.

The interpreter runs a @triton.jit body as Python, so Python can see what a GPU compile never lets it see: red
team 26 turned each kernel value into a Python int with len(range(v)), or by bisection with `A if v > t else B`
(the interpreter's tensors answer __index__ and __bool__), and computed a softmax with math.exp that scored
correct. A GPU compile refuses both (a tensor is not a Python int, nor a bool, at compile time). Rules on the
body's text catch the forms someone has thought of; Triton's front end (AST to TTIR, the first stage of every
GPU compile) is the definition of what a kernel may say. It runs without a GPU: each launch's kernel, with the
launch's own argument types and constexprs, goes through it for an sm_90 target before its body runs, and a
refusal is the GPU's compile error. The answer is kept per (function, specialization).

The front end decides a compile-time condition itself and compiles the branch it takes (a static `if`, one side
of a conditional expression, a short-circuit `and`), and the interpreter decides it again in Python, where a walrus
value, `is` or Python's own max can answer otherwise: red team 27 sent the front end down a `pass` and the
interpreter down red team 26's value-reading body. So the front end's run also records what it reached and how
each condition came out (Generator.visit), and the interpreter runs a body whose conditions and blocks are checked
against that record (SameBranches): a block the GPU compile never reached, or a compile-time condition that comes
out otherwise, is refused. min, max and print in a body are Triton's, as the front end takes them (interpreter_builtins).

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

    def __init__(self, interpreter, own_definition, triton_own, refuse=None):
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.compiler import ASTSource
        from triton.compiler import code_generator
        from triton.runtime.jit import JITFunction, create_function_from_signature
        self.interpreter = interpreter
        self.refuse = refuse or (lambda what, hint: RuntimeError(f"{what}: {hint}"))
        self.target = GPUTarget("cuda", 90, 32)
        self.backend = CUDABackend(self.target)
        self.ASTSource, self.code_generator = ASTSource, code_generator
        self.create_binder = create_function_from_signature
        self.passed: dict[tuple, dict] = {}   # specialization -> the record of what its compile reached
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
                # (file, line shift): the record names nodes by their place in the file, as SameBranches does
                self._mkgym_where = (self.fn.__code__.co_filename, node.lineno - 1)
                ast.increment_lineno(node, 1 - node.lineno)   # as Triton numbers it: the def is line 1
                return ast.Module(body=[node], type_ignores=[])
        self.AsJit = AsJit

        base = code_generator.CodeGenerator

        class Generator(base):
            """Triton's code generator, seeing the interpreter's functions (a module's attribute: tl.zeros,
            tl.max) as JITFunctions, and recording what it visits of the candidate's defs. A record's entries
            are kept per function as compiled (its mangled name: a helper called with other argument types or
            constexprs is another function), so that the interpreter checks a helper's body against the compile
            of that helper as it called it (red team 28: one helper compiled for a constant 7, where its else
            block legally folded len(range(7)), let its other call, on a kernel value, take that block)."""

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                # the static_range iterations the visit is inside: ((the loop's place, iteration), ...); each
                # iteration of an unrolled loop is a compile of its own (red team 29: iteration 0, where a name
                # was the constant 7, lent its branch to iteration 1, where it was a kernel value)
                self._mkgym_path: tuple = ()
                self._mkgym_loops: list = []
                if front.recording is not None and ROOT not in front.recording:   # the launched kernel's own
                    front.recording[ROOT] = frozenset([(self.function_name, ())])

            def visit_Attribute(self, node):
                return front.as_jit(super().visit_Attribute(node))

            def visit(self, node):
                where = getattr(self.jit_fn, "_mkgym_where", None)
                if where is None or front.recording is None or not isinstance(node, (ast.stmt, ast.expr)) \
                        or getattr(node, "end_lineno", None) is None:   # (not a node Triton made itself)
                    return super().visit(node)
                here = (self.function_name, self._mkgym_path, place(node, *where))
                if isinstance(node, ast.Call):   # the functions a call compiles are this call site's
                    front.call_sites.append(here)
                if isinstance(node, ast.For):
                    self._mkgym_loops.append([node, here, 0])
                try:
                    ret = super().visit(node)
                finally:
                    if isinstance(node, ast.Call):
                        front.call_sites.pop()
                    if isinstance(node, ast.For):
                        self._mkgym_loops.pop()
                front.recording.setdefault(here, set()).add(_outcome(ret))
                return ret

            def visit_compound_statement(self, stmts):
                loop = self._mkgym_loops[-1] if self._mkgym_loops else None
                if loop is None or stmts is not loop[0].body or not isinstance(loop[0].target, ast.Name) or \
                        not isinstance(self.lscope.get(loop[0].target.id), front.constexpr):
                    return super().visit_compound_statement(stmts)
                # an iteration of a static_range loop (its variable a constexpr; a dynamic loop's is a tensor)
                node, here, i = loop
                loop[2] += 1
                front.recording[("static", *here)] = True
                saved = self._mkgym_path
                self._mkgym_path = saved + ((here[2], i),)
                try:
                    return super().visit_compound_statement(stmts)
                finally:
                    self._mkgym_path = saved

            def call_JitFunction(self, fn, *args, **kwargs):
                # the callee's mangled name is the first that Triton's mangle_fn makes in this call (the
                # callee's own calls come after): kept for the candidate's call site this call is part of
                # (Triton's own jit functions, tl.max, and a combine function tl.reduce calls count for the
                # candidate's call of tl.max or tl.reduce)
                mark = len(front.mangled)
                try:
                    return super().call_JitFunction(fn, *args, **kwargs)
                finally:
                    if len(front.mangled) > mark and front.call_sites and front.recording is not None:
                        front.recording.setdefault(("call", *front.call_sites[-1]), set()).add(front.mangled[mark])
                    del front.mangled[mark:]
        self.Generator = Generator
        from triton.language.core import constexpr
        self.constexpr = constexpr
        plain_mangle = code_generator.mangle_fn

        def mangle(*args, **kwargs):
            name = plain_mangle(*args, **kwargs)
            front.mangled.append(name)
            return name
        self.mangle, self.plain_mangle = mangle, plain_mangle
        self.recording: dict | None = None     # the record of the compile running now
        self.mangled: list = []                # the names Triton's mangle_fn made in the calls running now
        self.call_sites: list = []             # the candidate's calls the compile is inside
        self.current: dict | None = None       # the record of the launch whose body runs now
        # the interpreter's: {(compiled function, static_range iterations)} whose body runs now
        self.context: list = []

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
            self.current = self.passed[key]
            self.context = [self.current.get(ROOT, frozenset())]
            return
        self.current = None
        record: dict = {}
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
            self.code_generator.mangle_fn = self.mangle
            self.recording, self.mangled, self.call_sites = record, [], []
            try:
                src.make_ir(self.target, options, self.backend.get_codegen_implementation(options),
                            self.backend.get_module_map(), ctx)
            finally:
                self.code_generator.CodeGenerator = self.Generator.__mro__[1]
                self.code_generator.mangle_fn = self.plain_mangle
                self.recording = None
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
        self.passed[key] = self.current = record
        self.context = [record.get(ROOT, frozenset())]

    # -- the interpreter's side: its body's conditions and blocks against the record (SameBranches) ----------
    def condition(self, where: tuple, value):
        """A condition of the running body (an if, a while, a conditional expression, an and/or operand)."""
        seen = self._seen(where, "the condition")
        if DYNAMIC not in seen:   # a compile-time condition there: it must come out the same here
            try:
                here = bool(value)
            except Exception:
                here = None
            if here not in seen:
                raise self.refuse(f"line {where[1]} of the kernel: a compile-time condition or comparison that Triton's "
                                  f"GPU compile took as {sorted(seen, key=str)} comes out {here} under the interpreter",
                                  "the cpu backend runs only what a GPU compile decided: a test on a type the two make "
                                  "apart (an int argument equal to 1 is a constexpr to a GPU's compile) decides "
                                  "nothing here")
        return value

    def reached(self, where: tuple) -> None:
        self._seen(where, "the block")

    def call(self, where: tuple, fn, /, *args, **kwargs):
        """A call of the running body: made only where the GPU compile made it, and the functions it compiled
        there (a helper as specialized for this call) are what the callee's body is checked against. A Python
        bool it returns (isinstance) is a compile-time condition, checked as one."""
        self._seen(where, "the call")
        callees = set().union(*self._recorded(where, "call"))
        if not callees:
            out = fn(*args, **kwargs)
        else:
            self.context.append(frozenset((name, ()) for name in callees))
            try:
                out = fn(*args, **kwargs)
            finally:
                self.context.pop()
        return self.condition(where, out) if type(out) is bool else out

    def loop(self, where: tuple, iterable):
        """A for loop of the running body: a static_range loop's iteration i is checked against the compile of
        iteration i (FrontEnd.Generator.visit_compound_statement); a dynamic loop's variable is a tensor, as the
        GPU compile makes it (the interpreter's was a Python int: red team 29)."""
        if not self._recorded(where, "static"):
            to_tensor = self.interpreter.interpreter_semantic.to_tensor
            for item in iterable:
                yield to_tensor(item, False)
            return
        ctx = self.context[-1]
        for i, item in enumerate(iterable):
            self.context.append(frozenset((name, path + ((where, i),)) for name, path in ctx))
            try:
                yield item
            finally:
                self.context.pop()

    def annotated(self, annotation, value):
        """An annotated assignment's value as the GPU compile binds it: a `tl.constexpr` name never holds a kernel
        value (red team 30 bound one, through a compile-time choice the two took apart, and read it with
        len(range(v))), and any other annotation makes the value a tensor, as a plain assignment does."""
        import triton.language.core as core
        if annotation is core.constexpr or isinstance(annotation, type) and issubclass(annotation, core.constexpr):
            if isinstance(value, core.tensor):
                raise self.refuse("a kernel value bound to a tl.constexpr name under the interpreter", "a GPU "
                                  "compile binds a tl.constexpr name to a compile-time value only")
            return value
        return self.interpreter.interpreter_semantic.to_tensor(self.assigned(value), False)

    def assigned(self, value):
        """An assigned tuple's elements as the GPU compile makes them (each a tensor but None and dtypes; the
        interpreter's to_tensor left a tuple's numbers Python's: red team 29)."""
        return self._sanitized(value) if type(value) is tuple else value

    def _sanitized(self, v):
        import triton.language.core as core
        if type(v) is tuple:
            return tuple(self._sanitized(x) for x in v)
        if isinstance(v, core.constexpr):
            v = v.value
        if v is None or isinstance(v, (core.tensor, core.dtype, tuple)):
            return v
        return self.interpreter.interpreter_semantic.to_tensor(v, False)

    def _recorded(self, where: tuple, kind: str | None = None) -> list:
        """The record's entries at `where` (of `kind`: "call", "static"; or what the compile visited there) for
        each compiled function, and static_range iterations, whose body runs now."""
        record = self.current or {}
        keys = (((kind,) if kind else ()) + (name, path, where)
                for name, path in (self.context[-1] if self.context else ()))
        return [record[k] for k in keys if k in record]

    def _seen(self, where: tuple, what: str) -> set:
        found = self._recorded(where)
        seen = set().union(*found) if found else None
        if seen is None:
            raise self.refuse(f"line {where[1]} of the kernel: {what} at {where[1]}:{where[2]} runs under the "
                              "interpreter but Triton's GPU compile never reached it",
                              "the cpu backend runs only what a GPU compile of the launch compiled")
        return seen


DYNAMIC = "dynamic"   # a kernel value: decided at run time, both ways compiled
ROOT = "root"         # a record's entry naming the launched kernel as compiled (its function name)


def place(node, filename: str, shift: int = 0) -> tuple:
    """A node's place in its file, and whether it is a statement: what the record and the interpreter's checks
    both name it by (red team 28: an expression statement and its own value had one place, so a block whose
    first statement the front end never ran as one, only walked into, passed as reached)."""
    return (filename, node.lineno + shift, node.col_offset, node.end_lineno + shift, node.end_col_offset,
            "stmt" if isinstance(node, ast.stmt) else "expr")


def _outcome(value):
    import triton.language.core as core
    if isinstance(value, core.tensor):
        return DYNAMIC
    if isinstance(value, core.constexpr):
        value = value.value
    try:
        return bool(value)
    except Exception:
        return DYNAMIC


class SameBranches(ast.NodeTransformer):
    """The interpreter's copy of a candidate's @triton.jit def, each condition, each block and each call checked
    against what Triton's front end did with the launch (FrontEnd.condition, FrontEnd.reached, FrontEnd.call). A
    call is checked wherever it sits, so what the interpreter evaluates and the GPU compile skipped (the later
    links of a chained comparison the front end cut short: red team 28) does not run."""
    COND, REACHED, CALL = "__mkgym_condition__", "__mkgym_reached__", "__mkgym_call__"
    LOOP, ASSIGNED, ANNOTATED = "__mkgym_loop__", "__mkgym_assigned__", "__mkgym_annotated__"
    # each name the rewritten body calls -> the FrontEnd method that answers it
    CHECKS = {COND: "condition", REACHED: "reached", CALL: "call", LOOP: "loop", ASSIGNED: "assigned",
              ANNOTATED: "annotated"}

    def __init__(self, filename: str):
        self.filename = filename

    def _where(self, node):
        return ast.Constant(place(node, self.filename))

    def _cond(self, test):
        return ast.copy_location(ast.Call(ast.Name(self.COND, ast.Load()), [self._where(test), test], []), test)

    def _block(self, body: list) -> list:
        if not body:
            return body
        call = ast.Call(ast.Name(self.REACHED, ast.Load()), [self._where(body[0])], [])
        return [ast.copy_location(ast.Expr(call), body[0]), *body]

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.body = self._block(node.body)
        return node

    def visit_If(self, node):
        self.generic_visit(node)
        node.test = self._cond(node.test)
        node.body, node.orelse = self._block(node.body), self._block(node.orelse)
        return node

    visit_While = visit_If   # a test, a body and an else block alike

    def visit_For(self, node):
        call = node.iter
        self.generic_visit(node)
        if isinstance(call, ast.Call):
            node.iter = call   # range(...), tl.static_range(...): the front end reads the call's parts, not the call
        node.iter = ast.copy_location(ast.Call(ast.Name(self.LOOP, ast.Load()), [self._where(node), node.iter], []),
                                      node.iter)
        node.body, node.orelse = self._block(node.body), self._block(node.orelse)
        return node

    def visit_AugAssign(self, node):
        # `x += v` is `x = x + v`, as the front end takes it (a tensor after), not Python's in-place update of a number
        self.generic_visit(node)
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target) \
            if isinstance(node.target, ast.Name) else node.target
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        return ast.copy_location(ast.Assign([node.target], value), node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        node.value = ast.copy_location(ast.Call(ast.Name(self.ASSIGNED, ast.Load()), [node.value], []), node.value)
        return node

    def visit_AnnAssign(self, node):
        # (a local's annotation is never evaluated by Python: evaluated here, as the front end does)
        self.generic_visit(node)
        if node.value is not None:
            node.value = ast.copy_location(ast.Call(ast.Name(self.ANNOTATED, ast.Load()),
                                                    [node.annotation, node.value], []), node.value)
        return node

    def visit_With(self, node):
        calls = [item.context_expr for item in node.items]
        self.generic_visit(node)
        for item, call in zip(node.items, calls):   # as a for loop's: the front end reads their parts
            if isinstance(call, ast.Call):
                item.context_expr = call
        node.body = self._block(node.body)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name(self.CALL, ast.Load()),
                                          [self._where(node), node.func, *node.args], node.keywords), node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        # a chain (a < b < c) evaluates a later link only while the earlier ones hold: each later operand is run
        # only where the GPU compile reached it
        node.comparators = [node.comparators[0], *(
            ast.copy_location(ast.BoolOp(ast.Or(), [ast.Call(ast.Name(self.REACHED, ast.Load()), [self._where(c)], []),
                                                    c]), c) for c in node.comparators[1:])]
        # and every comparison is a condition, wherever it is used: a compile-time one that comes out otherwise
        # under the interpreter (a dtype the two compute apart) chose a tuple's element, not a branch (red team 30)
        return self._cond(node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        node.test = self._cond(node.test)
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        node.values = [*(self._cond(v) for v in node.values[:-1]), node.values[-1]]
        return node


def interpreter_builtins(interpreter) -> dict:
    """min, max and print in a @triton.jit body, as Triton's front end takes them (its builtin_namespace: builtin_min,
    builtin_max, device_print): under the interpreter they were Python's, and Python's max of a block and a number
    returned one of the two objects (red team 27: an honest `max(x, -1e30)` failed; an `is` test of the result
    split the front end's branch from the interpreter's)."""
    from triton.compiler.code_generator import CodeGenerator
    names = CodeGenerator.builtin_namespace

    def as_triton(name):
        fn = names[name]

        def call(*args, **kwargs):
            kwargs["_semantic"] = interpreter.interpreter_semantic
            return fn(*args, **kwargs)
        call.__name__ = name
        return call
    return {n: as_triton(n) for n in ("min", "max", "print") if n in names}
