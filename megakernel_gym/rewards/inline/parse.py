"""The parser: host C++ tokens into the interpreter's tree (declarations, statements, expressions,
lambdas, templates), refusing the words the subset does not have.
"""
from __future__ import annotations

import re
from typing import Any


from megakernel_gym.rewards.inline.subset import Unsupported
from megakernel_gym.rewards.inline.values import _INT_TYPES


# AST: tuples ("kind", ...). Expressions and statements alike.
_SCALAR_WORDS = {"int", "unsigned", "signed", "long", "short", "char", "float", "double", "bool", "void",
                 "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "int16_t", "uint8_t", "int8_t",
                 "auto", "dim3", "cudaError_t", "cudaStream_t", "half", "__half", "__nv_bfloat16", "float4",
                 "float2", "scalar_t", "ptrdiff_t", "uint16_t"}
_QUALIFIERS = {"const", "constexpr", "static", "volatile", "register", "inline", "__restrict__", "__restrict"}
_TEMPLATE_FUNCS = {"data_ptr", "mutable_data_ptr", "const_data_ptr", "static_cast", "reinterpret_cast",
                   "const_cast", "numeric_limits", "item", "vector", "tuple", "make_tuple", "min", "max",
                   "accessor", "packed_accessor32", "packed_accessor64", "get"}


# Words that open a construct the interpreter does not take, and what it is.
_REFUSED_WORDS = {
    "asm": "inline assembly in host code", "__asm__": "inline assembly in host code",
    "__asm": "inline assembly in host code", "thread_local": "a thread_local variable",
    "extern": "an extern declaration in host code", "goto": "goto", "try": "try/catch in host code",
    "new": "new in host code", "delete": "delete in host code", "typedef": "a typedef inside a host function",
    "struct": "a struct inside a host function", "class": "a class inside a host function",
    "union": "a union inside a host function", "enum": "an enum inside a host function",
    "template": "a template inside a host function", "namespace": "a namespace inside a host function",
    "__attribute__": "an __attribute__ in host code",
    "operator": "an operator definition in host code",
}


_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_KEYWORDS = {"return", "throw", "case", "default", "else", "if", "for", "while", "do", "switch", "break",
             "continue", "goto", "new", "delete", "sizeof", "using", "typedef", "operator", "co_return", "co_yield",
             "co_await", "static_assert"} | set(_REFUSED_WORDS)


class Parser:
    def __init__(self, toks: list[str], kernels: set[str], types: set[str]):
        self.t, self.i, self.kernels, self.types = toks, 0, kernels, types
        self.quals: frozenset = frozenset()

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.t[j] if j < len(self.t) else ""

    def next(self) -> str:
        tok = self.peek()
        if not tok:
            raise Unsupported("host code ends early")
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise Unsupported(f"expected {tok!r}, found {got!r} in host code")

    # -- types ---------------------------------------------------------------------------
    def _qualified_name(self) -> str:
        parts = [self.next()]
        while self.peek() == "::":
            self.next()
            parts.append(self.next())
        return "::".join(parts)

    def is_type_start(self) -> bool:
        j = self.i
        while self.t[j:j + 1] and self.t[j] in _QUALIFIERS:
            j += 1
        tok = self.t[j] if j < len(self.t) else ""
        if tok in _SCALAR_WORDS or tok in self.types:
            return True
        if tok in ("torch", "at", "c10", "std", "cuda") and j + 2 < len(self.t) and self.t[j + 1] == "::":
            # torch::Tensor x / at::cuda::CUDAStream s / std::vector<...> v: a type followed by a name
            k = j
            while k + 2 < len(self.t) and self.t[k + 1] == "::":
                k += 2
            name = self.t[k]
            after = self.t[k + 1] if k + 1 < len(self.t) else ""
            if after == "<":
                return name in ("vector", "tuple", "optional", "array", "pair")
            return bool(name[:1].isupper()) and after not in ("(", "::", ".", ";", ")", ",") or \
                name in ("IntArrayRef", "Tensor", "TensorOptions", "ScalarType", "Device", "CUDAStream",
                         "OptionalCUDAGuard", "CUDAGuard", "Scalar") or _IDENT.match(after) is not None
        # `Name name`, `ns::Name name`: a declaration of a type the parser does not know (HostCheck judges it)
        k = j
        while k + 2 < len(self.t) and self.t[k + 1] == "::" and _IDENT.match(self.t[k]):
            k += 2
        nxt = self.t[k + 1] if k + 1 < len(self.t) else ""
        return bool(_IDENT.match(tok) and _IDENT.match(self.t[k]) and _IDENT.match(nxt)) and \
            tok not in _KEYWORDS and nxt not in _KEYWORDS

    def parse_type(self) -> str:
        """A type, as text without cv-qualifiers; `self.quals` says what the declared object is:
        const (the object itself, not a pointee), static, constexpr, ref."""
        quals: set[str] = set()
        while self.peek() in _QUALIFIERS:
            w = self.next()
            quals.add(w)
            if w == "constexpr":
                quals.add("const")
        base = []
        while True:
            tok = self.peek()
            if tok in ("unsigned", "signed", "long", "short", "int", "char") and (not base or base[-1] in (
                    "unsigned", "signed", "long", "short")):
                base.append(self.next())
                continue
            if tok == "const" and base:      # `int const x`
                self.next()
                quals.add("const")
                continue
            if base:
                break
            base.append(self._qualified_name())
            if self.peek() == "<":
                base.append(self._template_text())
            break
        ctype = " ".join(base).replace(" <", "<")
        while self.peek() in ("*", "&", "&&", "const", "__restrict__", "__restrict"):
            tok = self.next()
            if tok == "*":
                ctype += "*"
                quals.discard("const")     # `const float* p`: the pointee is const, p is not
            elif tok in ("&", "&&"):
                ctype += "&"
                quals.add("ref")
            elif tok == "const":
                quals.add("const")         # `float* const p`
        self.quals = frozenset(quals)
        return ctype

    def _template_text(self) -> str:
        """`<...>` as text, nested brackets included."""
        self.expect("<")
        depth, parts = 1, []
        while True:
            tok = self.next()
            if tok == "<":
                depth += 1
            elif tok == ">":
                depth -= 1
            elif tok == ">>":
                depth -= 2
                if depth <= 0:
                    if depth < 0:
                        self.i -= 1
                        self.t[self.i] = ">"
                    break
            if depth == 0:
                break
            parts.append(tok)
        text = re.sub(r"\s*::\s*", "::", " ".join(parts))
        return "<" + re.sub(r"\s+([*&])", r"\1", text) + ">"

    # -- statements ----------------------------------------------------------------------
    def parse_block(self) -> tuple:
        self.expect("{")
        body = []
        while self.peek() != "}":
            body.append(self.statement())
        self.expect("}")
        return ("block", body)

    def statement(self) -> tuple:
        tok = self.peek()
        if tok == "{":
            return self.parse_block()
        if tok == ";":
            self.next()
            return ("block", [])
        if tok == "if":
            self.next()
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            then = self.statement()
            other = None
            if self.peek() == "else":
                self.next()
                other = self.statement()
            return ("if", cond, then, other)
        if tok == "for":
            self.next()
            self.expect("(")
            init = self.statement() if self.peek() != ";" else (self.next() and ("block", []))
            cond = self.expr() if self.peek() != ";" else ("num", 1, "int")
            self.expect(";")
            step = self.expr() if self.peek() != ")" else None
            self.expect(")")
            return ("for", init, cond, step, self.statement())
        if tok == "while":
            self.next()
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            return ("for", ("block", []), cond, None, self.statement())
        if tok == "do":
            self.next()
            body = self.statement()
            self.expect("while")
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            self.expect(";")
            return ("do", body, cond)
        if tok == "return":
            self.next()
            value = None if self.peek() == ";" else self.expr()
            self.expect(";")
            return ("return", value)
        if tok in ("break", "continue"):
            self.next()
            self.expect(";")
            return (tok,)
        if tok == "throw":
            self.next()
            value = self.expr()
            self.expect(";")
            return ("throw", value)
        if tok == "switch":
            self.next()
            self.expect("(")
            value = self.expr()
            self.expect(")")
            self.expect("{")
            cases: list = []   # (label expression or None for default, statements); control falls through
            while self.peek() != "}":
                if self.peek() == "case":
                    self.next()
                    label = self.ternary()
                    self.expect(":")
                    cases.append((label, []))
                elif self.peek() == "default":
                    self.next()
                    self.expect(":")
                    cases.append((None, []))
                elif not cases:
                    raise Unsupported("a statement before the first case")
                else:
                    cases[-1][1].append(self.statement())
            self.expect("}")
            return ("switch", value, cases)
        if tok == "using":
            while self.next() != ";":
                pass
            return ("block", [])
        if tok in _REFUSED_WORDS:
            raise Unsupported(_REFUSED_WORDS[tok])
        if tok.startswith("AT_DISPATCH_"):
            return self.dispatch()
        if self.is_type_start():
            return self.declaration()
        e = self.expr()
        self.expect(";")
        return ("expr", e)

    def declaration(self) -> tuple:
        ctype = self.parse_type()
        quals = self.quals
        decls = []
        while True:
            extra = ""
            while self.peek() in ("*", "&"):
                extra += "*" if self.next() == "*" else "&"
            name = self.next()
            if not re.match(r"^[A-Za-z_]\w*$", name):
                raise Unsupported(f"cannot read the declaration of {name!r}")
            init: Any = None
            if self.peek() == "=":
                self.next()
                init = ("init", self.assign_expr())
            elif self.peek() == "(":
                self.next()
                init = ("ctor", self.args(")"))
            elif self.peek() == "{":
                self.next()
                init = ("brace", self.args("}"))
            elif self.peek() == "[":
                raise Unsupported(f"the array {name} in host code")
            q = quals | ({"ref"} if "&" in extra else set())
            decls.append(("decl", ctype + extra, name, init, q - ({"const"} if "*" in extra else set())))
            if self.peek() == ",":
                self.next()
                continue
            break
        self.expect(";")
        return decls[0] if len(decls) == 1 else ("block", decls, "flat")

    def dispatch(self) -> tuple:
        macro = self.next()
        self.expect("(")
        args = []
        while True:
            if self.peek() in ("[", "(") and (self.peek() == "[" or self.peek(1) == "["):
                parens = 0
                while self.peek() == "(":
                    self.next()
                    parens += 1
                self.expect("[")
                while self.next() != "]":
                    pass
                if self.peek() == "(":
                    self.next()
                    self.expect(")")
                body = self.parse_block()
                for _ in range(parens):
                    self.expect(")")
                args.append(("lambda", body))
            else:
                args.append(self.assign_expr())
            if self.peek() == ",":
                self.next()
                continue
            break
        self.expect(")")
        if self.peek() == ";":
            self.next()
        return ("dispatch", macro, args)

    # -- expressions ---------------------------------------------------------------------
    def args(self, close: str) -> list:
        out = []
        while self.peek() != close:
            out.append(self.assign_expr())
            if self.peek() == ",":
                self.next()
        self.expect(close)
        return out

    def expr(self) -> tuple:
        e = self.assign_expr()
        while self.peek() == ",":
            self.next()
            e = ("comma", e, self.assign_expr())
        return e

    def assign_expr(self) -> tuple:
        left = self.ternary()
        tok = self.peek()
        if tok in ("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="):
            self.next()
            return ("assign", tok, left, self.assign_expr())
        return left

    def ternary(self) -> tuple:
        cond = self.binary(0)
        if self.peek() == "?":
            self.next()
            a = self.assign_expr()
            self.expect(":")
            b = self.assign_expr()
            return ("ternary", cond, a, b)
        return cond

    _PREC = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
             ("+", "-"), ("*", "/", "%")]

    def binary(self, level: int) -> tuple:
        if level == len(self._PREC):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._PREC[level]:
            op = self.next()
            left = ("bin", op, left, self.binary(level + 1))
        return left

    def unary(self) -> tuple:
        tok = self.peek()
        if tok in ("-", "+", "!", "~"):
            self.next()
            return ("unary", tok, self.unary())
        if tok in ("++", "--"):
            self.next()
            return ("incr", tok, self.unary(), True)
        if tok == "*":
            raise Unsupported("pointer dereference in host code")
        if tok == "&":
            self.next()
            return ("addr", self.unary())
        if tok == "sizeof":
            self.next()
            self.expect("(")
            ctype = self.parse_type() if self.is_type_start() else None
            if ctype is None:
                raise Unsupported("sizeof of an expression")
            self.expect(")")
            return ("sizeof", ctype)
        if tok == "(" and self._cast_ahead():
            self.next()
            ctype = self.parse_type()
            self.expect(")")
            return ("cast", ctype, self.unary())
        return self.postfix(self.primary())

    def _cast_ahead(self) -> bool:
        save = self.i
        try:
            self.i += 1
            if not self.is_type_start():
                return False
            self.parse_type()
            return self.peek() == ")"
        except Unsupported:
            return False
        finally:
            self.i = save

    def primary(self) -> tuple:
        tok = self.next()
        if tok == "(":
            e = self.expr()
            self.expect(")")
            return e
        if tok == "{":
            return ("list", self.args("}"))
        if tok.startswith('"'):
            s = _unescape(tok[1:-1])
            while self.peek().startswith('"'):
                s += _unescape(self.next()[1:-1])
            return ("str", s)
        if tok.startswith("'"):
            return ("num", ord(_unescape(tok[1:-1])), "char")
        if re.match(r"^[\d.]", tok):
            return _number(tok)
        if tok == "[":
            raise Unsupported("a lambda outside AT_DISPATCH")
        if tok in _REFUSED_WORDS:
            raise Unsupported(_REFUSED_WORDS[tok])
        if not re.match(r"^[A-Za-z_]\w*$", tok):
            raise Unsupported(f"unexpected {tok!r} in host code")
        name = tok
        while self.peek() == "::":
            self.next()
            name += "::" + self.next()
        targs = None
        last = name.split("::")[-1]
        if self.peek() == "<" and (name in self.kernels or last in _TEMPLATE_FUNCS):
            targs = self._template_text()
        if self.peek() == "<<<":
            self.next()
            config = []
            while True:
                config.append(self.ternary())
                if self.peek() == ",":
                    self.next()
                    continue
                break
            self.expect(">>>")
            self.expect("(")
            return ("launch", name, targs, config, self.args(")"))
        return ("name", name, targs)

    def postfix(self, e: tuple) -> tuple:
        while True:
            tok = self.peek()
            if tok == "(":
                self.next()
                e = ("call", e, self.args(")"))
            elif tok in (".", "->"):
                self.next()
                member = self.next()
                targs = self._template_text() if self.peek() == "<" and member in _TEMPLATE_FUNCS else None
                e = ("member", e, member, targs)
            elif tok == "[":
                self.next()
                idx = self.expr()
                self.expect("]")
                e = ("index", e, idx)
            elif tok in ("++", "--"):
                self.next()
                e = ("incr", tok, e, False)
            elif tok == "{" and e[0] == "name":
                self.next()
                e = ("call", e, self.args("}"))
            else:
                return e


def _unescape(s: str) -> str:
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _number(tok: str) -> tuple:
    """A literal's value and C++ type: the first of the types its suffix and base allow that holds it
    (decimal: int, long, long long; hex, octal and binary also the unsigned ones)."""
    low = tok.lower().replace("'", "")
    m = re.match(r"^(0x[0-9a-f]+|0b[01]+|0[0-7]*|[1-9]\d*)(u?l{0,2}|l{0,2}u?)$", low)
    if not m:
        digits = re.match(r"^[\d.]+(?:e[+-]?\d+)?", low).group(0)
        suffix = low[len(digits):]
        if suffix not in ("", "f", "l") or not re.search(r"[.e]", digits):
            raise Unsupported(f"the literal {tok}")
        return ("num", float(digits), "float" if suffix == "f" else "double")
    digits, suffix = m.groups()
    base = 16 if digits.startswith("0x") else 2 if digits.startswith("0b") else 8 if digits.startswith("0") else 10
    v = int(digits[2:] if base in (16, 2) else digits, base)
    unsigned, longs = "u" in suffix, suffix.count("l")
    order = ["int32", "uint32", "int64", "uint64", "llong", "ullong"][{0: 0, 1: 2, 2: 4}[longs]:]
    if unsigned:
        order = [t for t in order if t.startswith("u")]
    elif base == 10:
        order = [t for t in order if not t.startswith("u")]
    for t in order:
        bits, signed = _INT_TYPES[t]
        if v < (1 << (bits - 1) if signed else 1 << bits):
            return ("num", v, t)
    raise Unsupported(f"the literal {tok}, too large for any integer type")
