"""The expression language of elementwise ops: `silu(a) * b`, `a + 0.5 * b`, `rsqrt(a + 1e-05)`.

Inputs are the letters a, b, c, ... (the op's inputs in order); numbers are Python float/int
literals (plus `inf`, `nan`); operators are + - * / ** and unary minus with Python precedence;
functions are those in FUNCTIONS. Nothing else parses, and nothing is ever passed to eval():
the text reaches the tile VM, codegen and an LLM's edits, so it must mean exactly one thing.

An expression is a tree of tuples:
    ("var", "a")  ("num", 0.5)  ("neg", x)  ("bin", "+", l, r)  ("call", "silu", (x, ...))
`format_expr(parse_expr(s))` is canonical (minimal parentheses, spaces around binary ops).

Evaluation semantics: every input is read as float32 (float64 if any input is float64), the
whole expression is computed at that precision and the result is cast once to the output dtype;
integer-only expressions stay integer. Fusing a chain of elementwise ops therefore drops the
intermediate roundings a chain of bf16 PyTorch ops would do, as a fused kernel does.
"""
from __future__ import annotations

import math
import re
import string

import torch
from torch import Tensor

VARS = tuple(string.ascii_lowercase)
CONSTANTS = {"inf": math.inf, "nan": math.nan}

# name -> number of arguments
FUNCTIONS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "silu": 1, "gelu": 1,
    "gelu_tanh": 1, "relu": 1, "abs": 1, "sin": 1, "cos": 1, "erf": 1, "max": 2, "min": 2,
}

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3, "**": 4}
_ATOM = 5

_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>\*\*|[-+*/(),]))")


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens, i = [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        m = _TOKEN.match(text, i)
        if not m:
            raise ValueError(f"bad elementwise expr {text!r}: unexpected character {text[i]!r} at "
                             f"position {i}; allowed are inputs a..z, numbers, + - * / ** ( ) , "
                             f"and the functions {', '.join(FUNCTIONS)}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind), m.start(kind)))
        i = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, _tokenize(text), 0

    def fail(self, why: str):
        where = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise ValueError(f"bad elementwise expr {self.text!r} at position {where}: {why}")

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            self.fail("unexpected end of expression (an operand or ')' is missing)")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, value: str):
        if self.peek() != value:
            self.fail(f"expected {value!r}, found {self.peek()!r}" if self.peek() is not None
                      else f"expected {value!r} before the end")
        self.i += 1

    def parse(self):
        if not self.tokens:
            self.fail("empty expression")
        node = self.sum()
        if self.i != len(self.tokens):
            self.fail(f"unexpected {self.peek()!r} after a complete expression")
        return node

    def sum(self):
        node = self.product()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            node = ("bin", op, node, self.product())
        return node

    def product(self):
        node = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()[1]
            node = ("bin", op, node, self.unary())
        return node

    def unary(self):
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        return self.power()

    def power(self):
        node = self.atom()
        if self.peek() == "**":
            self.take()
            node = ("bin", "**", node, self.unary())     # right-associative, as in Python
        return node

    def atom(self):
        kind, value, _ = self.take()
        if kind == "num":
            return ("num", float(value) if any(c in value for c in ".eE") else int(value))
        if kind == "name":
            if self.peek() == "(":
                return self.call(value)
            if value in CONSTANTS:
                return ("num", CONSTANTS[value])
            if value in VARS:
                return ("var", value)
            self.i -= 1
            self.fail(f"unknown name {value!r}; inputs are single letters a..z, constants are "
                      f"{', '.join(CONSTANTS)}")
        if value == "(":
            node = self.sum()
            self.expect(")")
            return node
        self.i -= 1
        self.fail(f"expected an operand, found {value!r}")

    def call(self, name: str):
        if name not in FUNCTIONS:
            self.i -= 1
            self.fail(f"unknown function {name!r}; known functions: {', '.join(FUNCTIONS)}")
        self.expect("(")
        args = [self.sum()]
        while self.peek() == ",":
            self.take()
            args.append(self.sum())
        self.expect(")")
        if len(args) != FUNCTIONS[name]:
            self.i -= 1
            self.fail(f"{name}() takes {FUNCTIONS[name]} argument(s), got {len(args)}")
        return ("call", name, tuple(args))


def parse_expr(text: str, n_inputs: int | None = None):
    """Parse an elementwise expression; with n_inputs, also check it uses only those inputs."""
    if not isinstance(text, str):
        raise ValueError(f"elementwise expr must be a string, got {type(text).__name__}")
    tree = _Parser(text).parse()
    if n_inputs is not None:
        allowed = set(VARS[:n_inputs])
        extra = sorted(variables(tree) - allowed)
        if extra:
            raise ValueError(f"elementwise expr {text!r} uses input(s) {', '.join(extra)} but the "
                             f"op has {n_inputs} input(s) ({', '.join(VARS[:n_inputs]) or 'none'})")
    return tree


def variables(tree) -> set[str]:
    if tree[0] == "var":
        return {tree[1]}
    if tree[0] == "num":
        return set()
    if tree[0] == "neg":
        return variables(tree[1])
    if tree[0] == "bin":
        return variables(tree[2]) | variables(tree[3])
    return set().union(*(variables(a) for a in tree[2]))


def count_var(tree, name: str) -> int:
    if tree[0] == "var":
        return int(tree[1] == name)
    if tree[0] == "num":
        return 0
    if tree[0] == "neg":
        return count_var(tree[1], name)
    if tree[0] == "bin":
        return count_var(tree[2], name) + count_var(tree[3], name)
    return sum(count_var(a, name) for a in tree[2])


def substitute(tree, mapping: dict):
    """Replace variables by subtrees (names not in mapping stay)."""
    kind = tree[0]
    if kind == "var":
        return mapping.get(tree[1], tree)
    if kind == "num":
        return tree
    if kind == "neg":
        return ("neg", substitute(tree[1], mapping))
    if kind == "bin":
        return ("bin", tree[1], substitute(tree[2], mapping), substitute(tree[3], mapping))
    return ("call", tree[1], tuple(substitute(a, mapping) for a in tree[2]))


def _prec(tree) -> int:
    if tree[0] == "bin":
        return _PREC[tree[1]]
    if tree[0] == "neg" or (tree[0] == "num" and (tree[1] < 0 or math.copysign(1, tree[1]) < 0)):
        return _PREC["neg"]
    return _ATOM


def _num(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def format_expr(tree) -> str:
    kind = tree[0]
    if kind == "var":
        return tree[1]
    if kind == "num":
        return _num(tree[1])
    if kind == "call":
        return f"{tree[1]}({', '.join(format_expr(a) for a in tree[2])})"
    if kind == "neg":
        inner = format_expr(tree[1])
        return f"-({inner})" if _prec(tree[1]) < _PREC["neg"] else f"-{inner}"
    op, left, right = tree[1], tree[2], tree[3]
    p = _PREC[op]
    ls, rs = format_expr(left), format_expr(right)
    if op == "**":
        # The base must be an atom; the exponent may be anything from unary minus up.
        if _prec(left) < _ATOM:
            ls = f"({ls})"
        if _prec(right) < _PREC["neg"]:
            rs = f"({rs})"
    else:
        if _prec(left) < p:
            ls = f"({ls})"
        # Equal precedence on the right keeps its parentheses: a - (b - c), and a + (b + c),
        # whose float rounding differs from (a + b) + c.
        if _prec(right) <= p:
            rs = f"({rs})"
    return f"{ls} {op} {rs}"


# ---------------------------------------------------------------------------------------------
# Evaluation

def _as_tensor(x, like: Tensor | None):
    if isinstance(x, Tensor):
        return x
    return torch.tensor(x, dtype=like.dtype if like is not None else torch.float32,
                        device=like.device if like is not None else None)


_UNARY = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "relu": torch.relu, "abs": torch.abs, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf,
}


def _eval(tree, env: dict, like: Tensor | None):
    kind = tree[0]
    if kind == "var":
        return env[tree[1]]
    if kind == "num":
        return tree[1]
    if kind == "neg":
        return -_eval(tree[1], env, like)
    if kind == "bin":
        left, right = _eval(tree[2], env, like), _eval(tree[3], env, like)
        if not isinstance(left, Tensor) and not isinstance(right, Tensor):
            left = _as_tensor(left, like)
        op = tree[1]
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            return left / right
        return left ** right
    name, args = tree[1], [_eval(a, env, like) for a in tree[2]]
    if name in ("max", "min"):
        a, b = (_as_tensor(v, like) for v in args)
        return torch.maximum(a, b) if name == "max" else torch.minimum(a, b)
    return _UNARY[name](_as_tensor(args[0], like))


def evaluate(expr, inputs: list[Tensor], out_dtype: torch.dtype | None = None) -> Tensor:
    """Evaluate an expression (text or tree) over inputs a, b, c... (broadcasting like torch)."""
    tree = parse_expr(expr, len(inputs)) if isinstance(expr, str) else expr
    floating = [t for t in inputs if t.is_floating_point()]
    if floating or (out_dtype is not None and out_dtype.is_floating_point):
        compute = torch.float64 if any(t.dtype == torch.float64 for t in inputs) else torch.float32
        vals = [t.to(compute) for t in inputs]
    else:
        compute, vals = None, list(inputs)
    like = vals[0] if vals else None
    if like is None:
        like = torch.empty((), dtype=compute or torch.float32)
    result = _as_tensor(_eval(tree, dict(zip(VARS, vals)), like), like)
    if out_dtype is None:
        out_dtype = inputs[0].dtype if inputs else result.dtype
    return result.to(out_dtype)
