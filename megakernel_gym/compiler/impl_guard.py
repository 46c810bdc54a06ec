"""`impl` task bodies inside the trust boundary: read as the C preprocessor reads them, checked as
tokens, and compiled from those tokens.

An agent's `impl` body is CUDA C that goes into the megakernel. Checks on its raw text miss what the
preprocessor makes of it: `%:` is a digraph for `#` (so `%:include "/etc/hostname"` is an include),
`??=` a trigraph for it, a backslash-newline joins two lines into one, `a%:%:b` pastes a name
together, `_Pragma("...")` is a directive in an expression, `bitand x` is `&x`. So a body is first
put through what translation phases 1-3 do (trigraphs, line splices, comments removed, pp-tokens,
digraphs and the alternative tokens spelled as the operators they are: `normalize`), then checked as
tokens (`impl_code_problem`), and then the megakernel gets those tokens, canonically spelled and
space-separated (`emit_body`), not the agent's text: what was checked is exactly what NVRTC compiles,
whatever NVRTC's own preprocessor would have made of the original spelling.

What a body may not have (each refusal names the construct and the fix):
- anything that reaches the preprocessor: a `#`/`%:`/`??=` directive (includes, `#line`, `#pragma`,
  `#define`), `##` pasting, `_Pragma`, `__has_include`, `__VA_ARGS__`, predefined macros; string
  literals (the preprocessor's and `printf`'s material); universal character names, `$`, non-ASCII;
- names that leave the task: asm, new kernels or functions, `extern`, `static` storage (state that
  outlives a run: a body could count its runs), timers, sleeps, traps, compiler intrinsics
  (`__builtin_*`, `__nvvm_*`), the heap, raw copies and I/O, new types and templates, pointer
  conversions (`reinterpret_cast`, `decltype`), memory reached without a pointer token (surface and
  texture objects, whose handles are integers; `__cvta_*_to_generic`), and the megakernel's own
  names (its tables `T`, `S`, its `mk_`/`ws_`/`ll_` helpers, macros and shared variables: codegen
  checks every file-scope name of the generated source too);
- any pointer: no address-of (`&x`, `bitand x`, `&&label`), no dereference, no pointer or reference
  type (`float*`, `auto&`, `(unsigned*)out`), no `->`, and an array or tensor is only ever used
  fully indexed (`acc[i]`, never `acc`, `acc + 4` or `t[i]` of a 2-D `t`), except as `red` in
  `block_sum(v, red)` and as an atomic's first argument, one element's address through its checked
  index (`atomicAdd(&sm[j], v)`).

Memory (the write region): with no pointer anywhere, a body reaches memory only by indexing, and
every index is checked on the GPU. The wrapper (codegen `_Emitter.impl_body`) gives the body views,
not pointers: `in0`.. read-only (an index outside the tensor reads 0), `out` writable only inside the
task's tile [lo, hi) along its tile axis (every other axis whole), `sm` the contract's shared memory
(SMEM_LIMIT bytes as floats); and every subscript of an array the body declares is rewritten to
`acc[mk_ix(i, extent)]`. An index out of its range is not performed: it records the first fault
(what, which impl function, the index) in `mk_impl_fault`, which the runtime reads after the run
(compiler/runtime.py Launch.check) and reports as an error naming the op, the tensor and the index.

Not covered here: how long a body runs (the GPU judge's watchdog), how fast NVRTC compiles it (the
size caps, ir.MAX_IMPL_CHARS and MAX_IMPL_TOTAL_CHARS, and the compile's time limit in
cuda/nvrtc.py), and what the compiler says back (`compile_log_for_agent` keeps only diagnostics
located in the megakernel's own source).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# -- translation phases 1-3 ------------------------------------------------------------------

TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}
DIGRAPHS = {"<:": "[", ":>": "]", "<%": "{", "%>": "}", "%:": "#", "%:%:": "##"}
ALT_TOKENS = {"and": "&&", "and_eq": "&=", "bitand": "&", "bitor": "|", "compl": "~", "not": "!",
              "not_eq": "!=", "or": "||", "or_eq": "|=", "xor": "^", "xor_eq": "^="}
PUNCTUATORS = sorted(["%:%:", "...", "<<=", ">>=", "->*", "<=>", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
                      "==", "!=", "&&", "||", "*=", "/=", "%=", "+=", "-=", "&=", "^=", "|=", "##", ".*", "<:",
                      ":>", "<%", "%>", "%:"] + list("{}[]#()<>%:;.?*+-/^&|~!=,"), key=len, reverse=True)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")


class ImplBodyError(ValueError):
    """A body that cannot be read as C tokens (an unclosed comment, literal) or that breaks a rule."""


@dataclass(frozen=True)
class Tok:
    kind: str      # id, num, char, str, punct, other
    text: str      # canonical spelling: digraphs, trigraph-made characters and alternative tokens as their operators
    spelled: str   # as the agent wrote it (line splices removed)
    line: int      # the body line (1-based) the token starts on
    first: bool    # the first token of its logical line (a `#` there starts a directive)


def _phases_1_2(code: str) -> tuple[str, list[int], list[str]]:
    """Trigraphs replaced and line splices removed: the text, each character's body line, and
    each character's original spelling (a trigraph's three characters)."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    chars: list[str] = []
    lines: list[int] = []
    spell: list[str] = []
    line, i, n = 1, 0, len(code)
    while i < n:
        c = code[i]
        if c == "?" and code.startswith("??", i) and i + 2 < n and code[i + 2] in TRIGRAPHS:
            chars.append(TRIGRAPHS[code[i + 2]])
            spell.append(code[i:i + 3])
            lines.append(line)
            i += 3
            continue
        chars.append(c)
        spell.append(c)
        lines.append(line)
        if c == "\n":
            line += 1
        i += 1
    # phase 2: a backslash (however spelled), optional blanks, then a newline join two lines
    out_c, out_l, out_s = [], [], []
    j, m = 0, len(chars)
    while j < m:
        if chars[j] == "\\":
            k = j + 1
            while k < m and chars[k] in " \t":
                k += 1
            if k < m and chars[k] == "\n":
                j = k + 1
                continue
        out_c.append(chars[j])
        out_l.append(lines[j])
        out_s.append(spell[j])
        j += 1
    return "".join(out_c), out_l, out_s


def normalize(code: str) -> list[Tok]:
    """The body's pp-tokens, as translation phases 1-3 leave them (comments gone, each token in its
    canonical spelling). Raises ImplBodyError for text that is no token stream."""
    text, lines, spell = _phases_1_2(code)
    toks: list[Tok] = []
    i, n = 0, len(text)
    first = True

    def add(kind: str, canon: str, start: int, end: int) -> None:
        nonlocal first
        toks.append(Tok(kind, canon, "".join(spell[start:end]), lines[start], first))
        first = False

    while i < n:
        c = text[i]
        if c == "\n":
            first = True
            i += 1
            continue
        if c in " \t\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ImplBodyError(f"line {lines[i]}: a /* comment is never closed with */")
            i = j + 2
            continue
        m = _IDENT.match(text, i)
        if m:
            word = m.group(0)
            end = m.end()
            quote = text[end] if end < n else ""
            if quote and quote in "'\"" and word in ("u8", "u", "U", "L", "R", "u8R", "uR", "UR", "LR"):
                i = _literal(text, lines, i, end, add)
                continue
            if word in ALT_TOKENS:
                add("punct", ALT_TOKENS[word], i, end)
            else:
                add("id", word, i, end)
            i = end
            continue
        m = _NUMBER.match(text, i)
        if m:
            add("num", m.group(0), i, m.end())
            i = m.end()
            continue
        if c in "'\"":
            i = _literal(text, lines, i, i, add)
            continue
        for p in PUNCTUATORS:
            if text.startswith(p, i):
                # C++'s rule for `<::`: `<` alone, unless the next character is `:` or `>`
                if p == "<:" and text.startswith("<::", i) and text[i + 3:i + 4] not in (":", ">"):
                    p = "<"
                add("punct", DIGRAPHS.get(p, p), i, i + len(p))
                i += len(p)
                break
        else:
            add("other", c, i, i + 1)
            i += 1
    return toks


def _literal(text: str, lines: list[int], start: int, quote_at: int, add) -> int:
    """A character or string literal (a raw string too) from `start` (its prefix) to its close."""
    q = text[quote_at]
    prefix = text[start:quote_at]
    if q == '"' and prefix.endswith("R"):
        m = re.match(r'"([^ ()\\\t\v\f\n]{0,16})\(', text[quote_at:])
        if m:
            close = text.find(")" + m.group(1) + '"', quote_at + m.end())
            if close < 0:
                raise ImplBodyError(f"line {lines[start]}: a raw string literal is never closed")
            end = close + len(m.group(1)) + 2
            add("str", text[start:end], start, end)
            return end
    j = quote_at + 1
    n = len(text)
    while j < n and text[j] != q:
        if text[j] == "\n":
            break
        j += 2 if text[j] == "\\" else 1
    if j >= n or text[j] != q:
        what = "character" if q == "'" else "string"
        raise ImplBodyError(f"line {lines[start]}: a {what} literal is never closed with {q}")
    add("char" if q == "'" else "str", text[start:j + 1], start, j + 1)
    return j + 1


# -- the rules ---------------------------------------------------------------------------

# what each refused name is, and what to write instead
_WHY = {
    "pp": ("preprocessor operators", "a body is plain C statements; the helpers and your tensors are already in scope"),
    "predef": ("predefined macros", "a body is plain C statements; the task's facts are lo, hi, tile_axis and the shapes"),
    "asm": ("inline assembly", "write it in C; the compiler emits the PTX"),
    "kernel": ("new kernels", "a body computes one task inside the megakernel"),
    "extern": ("extern declarations", "use only the names the contract puts in scope"),
    "fn": ("new functions or global variables", "write the computation inline (loops, locals, __shared__ arrays)"),
    "static": ("static storage (state that outlives a run)", "use locals, __shared__ arrays or sm; every run must "
                                                             "compute its result"),
    "timers": ("timers", "a body computes; the judge times"),
    "traps": ("traps", "a body computes its tile; it does not stop the kernel"),
    "sleeps": ("sleeps", "a body computes; waiting is the megakernel's"),
    "intrinsics": ("compiler intrinsics", "use the CUDA math and warp functions (expf, __shfl_xor_sync, ...) and "
                                          "the helpers"),
    "heap": ("memory allocation, raw copies or I/O", "index in0.., out and sm; use locals or __shared__ arrays"),
    "cast": ("pointer conversions", "index the tensors you were given (in0[i], out[i], sm[i]); casts to "
                                    "arithmetic types are fine"),
    "types": ("new types or templates", "use the built-in arithmetic and vector types"),
    "handles": ("memory reached through a handle or an address made from an integer (surface and texture "
                "objects, __cvta_*)", "index the tensors you were given (in0[i], out[i], sm[i])"),
    "own": ("the megakernel's own tables or helpers", "a body reaches its tensors by name (in0.., out, sm, lo, hi) "
                                                      "and calls the contract's helpers (bf2f, f2bf, warp_sum, "
                                                      "warp_max, block_sum)"),
}
_NAMES = {
    **dict.fromkeys(["_Pragma", "__pragma", "__has_include", "__has_include_next", "__has_attribute",
                     "__has_cpp_attribute", "__has_builtin", "__has_feature", "__has_extension", "__VA_ARGS__",
                     "__VA_OPT__", "defined"], "pp"),
    **dict.fromkeys(["__FILE__", "__LINE__", "__DATE__", "__TIME__", "__TIMESTAMP__", "__COUNTER__", "__BASE_FILE__",
                     "__FILE_NAME__", "__INCLUDE_LEVEL__", "__func__", "__FUNCTION__", "__PRETTY_FUNCTION__"],
                    "predef"),
    **dict.fromkeys(["asm", "__asm", "__asm__"], "asm"),
    "__global__": "kernel",
    "extern": "extern",
    **dict.fromkeys(["__device__", "__host__", "__noinline__", "__forceinline__", "__inline__", "inline",
                     "__managed__", "__constant__", "__grid_constant__", "__launch_bounds__", "__cluster_dims__"],
                    "fn"),
    **dict.fromkeys(["static", "thread_local", "__thread", "mutable"], "static"),
    **dict.fromkeys(["__trap", "trap", "__brkpt", "abort", "exit", "assert", "__assert_fail", "__assertfail",
                     "__prof_trigger"], "traps"),
    **dict.fromkeys(["malloc", "free", "calloc", "realloc", "alloca", "new", "delete", "memcpy", "memset", "memmove",
                     "printf", "vprintf", "__stcg", "__stcs", "__stwb", "__stwt"], "heap"),
    **dict.fromkeys(["reinterpret_cast", "const_cast", "dynamic_cast", "typeid", "typeof", "__typeof__", "__typeof",
                     "decltype", "__builtin_addressof", "nullptr"], "cast"),
    **dict.fromkeys(["typedef", "using", "template", "typename", "struct", "class", "union", "enum", "namespace",
                     "operator", "friend", "virtual", "this", "concept", "requires", "co_await", "co_yield",
                     "co_return", "__attribute__", "__declspec", "alignas", "__align__"], "types"),
    **dict.fromkeys(["T", "S", "counters", "status", "trace", "q_task", "slot_args"], "own"),
}
# families of names, by pattern (checked after the exact names)
_PATTERNS = [(re.compile(r"clock|globaltimer"), "timers"), (re.compile(r"sleep"), "sleeps"),
             (re.compile(r"^__builtin_|^__nvvm_|^__nv_|^__cuda|^__nvrtc|^__cudaCDP|^_Z"), "intrinsics"),
             (re.compile(r"^cuda[A-Z]"), "heap"),
             (re.compile(r"^(surf|tex)[A-Z0-9]|^__i?(surf|tex)|^__cvta_"), "handles"),
             (re.compile(r"^(mk_|Mk|MK_|ws_|WS_|ll_|LL_|QS|PROBE_|pre_\d|op_\d)"), "own")]

# the names a body's wrapper gives it (codegen _Emitter.impl_body): views, indexed once
VIEW = re.compile(r"^(in\d+|out\d*|sm)$")
# const arrays the wrapper gives it, one index each
SHAPE = re.compile(r"^(in\d+|out\d*)_shape$")
WRAPPER_NAMES = re.compile(r"^(in\d+|out\d*|sm|(in\d+|out\d*)_shape|lo|hi|part|tile_axis)$")
# the contract's helpers (the megakernel defines them; a body may call them)
HELPERS = frozenset({"bf2f", "f2bf", "warp_sum", "warp_max", "block_sum", "INFINITY", "NAN"})

# type specifiers a declaration starts with (a body can name no other type: no typedef, struct, template)
TYPE_WORDS = frozenset("""void char short int long float double signed unsigned bool auto wchar_t char8_t char16_t
    char32_t size_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    dim3 half __half""".split())
_VECTOR_TYPE = re.compile(r"^(u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]$")
QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict", "register", "__shared__",
                        "constexpr"})
# after these a `*` or `&` is unary (an operand is expected), after anything else binary
_OPERAND_END = {"id", "num", "char", "str"}
_EXPR_KEYWORDS = frozenset({"return", "case", "sizeof", "else", "do", "throw", "co_return", "alignof", "new", "delete",
                            "goto"})


def _is_type_word(t: Tok) -> bool:
    return t.kind == "id" and (t.text in TYPE_WORDS or t.text in QUALIFIERS or bool(_VECTOR_TYPE.match(t.text)))


def _name_problem(word: str) -> str | None:
    """The category of a refused identifier, or None."""
    cat = _NAMES.get(word)
    if cat is None:
        for pat, c in _PATTERNS:
            if pat.search(word):
                cat = c
                break
    return cat


def _refuse(t: Tok, what: str, fix: str, note: str = "") -> str:
    spelled = t.spelled if t.spelled == t.text else f"{t.spelled}"
    return f"line {t.line}: the code uses `{spelled}`{note}, and a task body may not have {what}; {fix}"


def _spelling_note(t: Tok) -> str:
    if t.spelled != t.text:
        how = ("a digraph" if t.spelled in DIGRAPHS else "an alternative token" if t.spelled in ALT_TOKENS
               else "a trigraph" if "??" in t.spelled else "a spelling")
        return f" ({how} for `{t.text}`)"
    return ""


@dataclass
class Body:
    """A body read and checked: its tokens, the arrays it declares (name -> rank) and where."""
    toks: list[Tok]
    arrays: dict[str, int]
    declarators: set[int]        # token indices that declare a name (not a use)
    block_sum_args: set[int]     # token indices of an array passed whole as block_sum's `red`


def _match(toks: list[Tok]) -> dict[int, int]:
    """Each bracket's partner; raises ImplBodyError on an unbalanced one."""
    pairs, stack = {}, []
    for i, t in enumerate(toks):
        if t.kind != "punct":
            continue
        if t.text in "([{":
            stack.append(i)
        elif t.text in ")]}":
            want = {")": "(", "]": "[", "}": "{"}[t.text]
            if not stack or toks[stack[-1]].text != want:
                raise ImplBodyError(f"line {t.line}: `{t.spelled}` closes nothing open (a task body is one "
                                    "block: its brackets and braces balance)")
            j = stack.pop()
            pairs[i], pairs[j] = j, i
    if stack:
        t = toks[stack[-1]]
        raise ImplBodyError(f"line {t.line}: `{t.spelled}` is never closed (a task body is one block: its brackets "
                            "and braces balance)")
    return pairs


def _declarations(toks: list[Tok], pairs: dict[int, int]) -> tuple[dict[str, int], set[int]]:
    """The arrays the body declares (name -> rank) and the token indices of every declared name.
    A declaration is a statement that starts with a type word; its declarators are the names at its
    top level, each followed by its [extents] and an initializer."""
    arrays: dict[str, int] = {}
    decl: set[int] = set()
    n = len(toks)
    for s in range(n):
        prev = toks[s - 1] if s else None
        at_start = (prev is None or (prev.kind == "punct" and prev.text in ";{}")
                    or (prev.kind == "id" and prev.text in ("else", "do"))
                    or (prev.kind == "punct" and prev.text == "(" and s >= 2 and toks[s - 2].text == "for")
                    or (prev.kind == "punct" and prev.text == ")" and pairs.get(s - 1, 0) >= 1
                        and toks[pairs[s - 1] - 1].text in ("if", "for", "while", "switch")))
        if not at_start or not _is_type_word(toks[s]):
            continue
        i = s
        while i < n and _is_type_word(toks[i]):
            i += 1
        while i < n:
            t = toks[i]
            if t.kind != "id":
                break            # `float (x)`, `float *p`: refused by the token rules, or not C
            decl.add(i)
            rank, j = 0, i + 1
            while j < n and toks[j].text == "[" and toks[j].kind == "punct":
                rank += 1
                j = pairs[j] + 1
            if j < n and toks[j].text == "(":
                inner = toks[j + 1] if j + 1 < n else None
                if inner is not None and (_is_type_word(inner) or inner.text == ")"):
                    raise ImplBodyError(_refuse(t, "function declarations", "write the computation inline",
                                                " (declared as a function)"))
            if rank:
                if arrays.get(t.text, rank) != rank:
                    raise ImplBodyError(f"line {t.line}: `{t.text}` is declared as arrays of {arrays[t.text]} and "
                                        f"{rank} dimensions; give each array a name of its own")
                arrays[t.text] = rank
            # skip the initializer to the next top-level comma, or the end of the declaration
            while j < n and not (toks[j].kind == "punct" and toks[j].text in (",", ";", ":", ")")):
                j = pairs[j] + 1 if toks[j].kind == "punct" and toks[j].text in "([{" else j + 1
            if j < n and toks[j].text == ",":
                i = j + 1
                continue
            break
    return arrays, decl


def _directive_problem(toks: list[Tok], i: int) -> str:
    t = toks[i]
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if t.first:
        name = t.spelled + (nxt.spelled if nxt is not None and nxt.kind == "id" and nxt.line == t.line else "")
        note = " (a preprocessor directive" + (f"; `{t.spelled}` is {_spelling_note(t)[2:-1]}" if t.spelled != "#"
                                                else "") + ")"
        return _refuse(Tok(t.kind, t.text, name, t.line, t.first), "preprocessor lines",
                       "write plain C statements: the helpers and your tensors are already in scope, and there is "
                       "nothing to include", note)
    return _refuse(t, "preprocessor operators", "write plain C statements", _spelling_note(t))


def _check(code: str, own_names: frozenset[str] = frozenset()) -> Body:
    """The body read and checked; raises ImplBodyError naming the first construct it may not have."""
    toks = normalize(code)
    # what reaches the preprocessor, is no C token, or names what a body may not: the first, in text order
    for i, t in enumerate(toks):
        if t.kind == "punct" and t.text == "#":
            raise ImplBodyError(_directive_problem(toks, i))
        if t.kind == "punct" and t.text == "##":
            raise ImplBodyError(_refuse(t, "token pasting", "write each name whole", _spelling_note(t)))
        if t.kind == "str":
            raise ImplBodyError(_refuse(t, "string literals", "a task body has no use for text (no printf, no "
                                        "_Pragma, no asm)"))
        if t.kind == "other" and (t.text == "\\" or t.text == "$" or not t.text.isascii()):
            why = ("universal character names or stray backslashes" if t.text == "\\" else
                   "characters outside C's basic set")
            raise ImplBodyError(_refuse(t, why, "spell names in plain ASCII letters, digits and _"))
        if t.kind == "id":
            cat = _name_problem(t.text)
            if cat is None and t.text in own_names and t.text not in HELPERS and not WRAPPER_NAMES.match(t.text):
                cat = "own"
            if cat:
                raise ImplBodyError(_refuse(t, *_WHY[cat]))
    pairs = _match(toks)
    arrays, decl = _declarations(toks, pairs)
    for i in sorted(decl):
        t = toks[i]
        if WRAPPER_NAMES.match(t.text):
            raise ImplBodyError(f"line {t.line}: the code declares `{t.text}`, which the wrapper gives the body "
                                "(in0.., out, sm, the shapes, lo, hi, part, tile_axis); name yours differently")
    # pointers: none made, none used
    block_args: set[int] = set()
    expect_operand = True
    n = len(toks)
    for i, t in enumerate(toks):
        prev = toks[i - 1] if i else None
        if t.kind == "punct" and t.text in ("&", "*", "&&"):
            if prev is not None and _is_type_word(prev):
                raise ImplBodyError(_refuse(t, "pointer or reference types", "index the tensors you were given "
                                            "(in0[i], out[i], sm[i]) and keep values in locals",
                                            _spelling_note(t) + f" after `{prev.spelled}`"))
            if expect_operand and not (t.text == "&" and _atomic_operand(toks, pairs, arrays, i)):
                what = "dereferences" if t.text == "*" else "address-of"
                raise ImplBodyError(_refuse(t, f"pointers ({what})", "index the tensors you were given "
                                            "(in0[i], out[i], sm[i]) and your own arrays" +
                                            ("; only an atomic takes an address, one element's: atomicAdd(&sm[i], v)"
                                             if t.text != "*" else ""), _spelling_note(t)))
        elif t.kind == "punct" and t.text in ("->", "->*", ".*"):
            raise ImplBodyError(_refuse(t, "pointers (member access through one)", "keep values in locals"))
        elif t.kind == "punct" and t.text == "[":
            if prev is None or not (prev.kind == "id" or (prev.kind == "punct" and prev.text == "]")):
                raise ImplBodyError(_refuse(t, "subscripts of anything but a named array (lambdas, attributes, "
                                            "`(p)[i]`)", "index an array by its name: acc[i], out[i]",
                                            _spelling_note(t)))
            if prev.kind == "id" and not (VIEW.match(prev.text) or SHAPE.match(prev.text) or prev.text in arrays):
                raise ImplBodyError(f"line {t.line}: the code indexes `{prev.text}`, which is no array the body "
                                    "declares and no tensor it was given; a task body indexes in0.., out, sm, the "
                                    "shapes and arrays it declares (`float acc[4];`, `__shared__ float red[8];`)")
        elif t.kind == "id" and (VIEW.match(t.text) or SHAPE.match(t.text) or t.text in arrays) and i not in decl:
            rank = arrays.get(t.text, 1)
            j, got = i + 1, 0
            while j < n and toks[j].kind == "punct" and toks[j].text == "[":
                got += 1
                j = pairs[j] + 1
            if got == 0:
                if prev is not None and prev.text == "(" and i >= 2 and toks[i - 2].text == "sizeof" \
                        and j < n and toks[j].text == ")":
                    pass
                elif (t.text in arrays and prev is not None and prev.text == "," and j < n and toks[j].text == ")"
                      and _call_of(toks, pairs, j) == "block_sum"):
                    block_args.add(i)
                else:
                    what = ("a view of its tensor whose every index is checked, not a pointer"
                            if VIEW.match(t.text) else "an array")
                    raise ImplBodyError(f"line {t.line}: the code uses `{t.text}` without an index, and a task body "
                                        f"may not have pointers: `{t.text}` is {what}, used element by element; "
                                        f"index it ({t.text}[i])")
            elif got < rank:
                raise ImplBodyError(f"line {t.line}: `{t.text}` has {rank} dimensions and the code gives it {got} "
                                    "index(es), which leaves a pointer to a row, and a task body may not have "
                                    "pointers; index every dimension")
        # is an operand expected next? (then `*` and `&` would be unary)
        if t.kind in ("num", "char", "str") or (t.kind == "id" and t.text not in _EXPR_KEYWORDS
                                                and not _is_type_word(t)):
            expect_operand = False
        elif t.kind == "punct" and t.text in (")", "]"):
            expect_operand = False
        elif not (t.kind == "punct" and t.text in ("++", "--")):   # postfix or prefix: the state holds
            expect_operand = True
    return Body(toks, arrays, decl, block_args)


def _atomic_operand(toks: list[Tok], pairs: dict[int, int], arrays: dict[str, int], i: int) -> bool:
    """Whether the `&` at i is an atomic's first argument, the address of one element through its
    checked index: `atomicAdd(&sm[j], v)`, `atomicMax(&acc[j], v)`, `atomicCAS(&out[k], a, b)`. The
    address lives only as the argument."""
    n = len(toks)
    if not (i >= 2 and toks[i - 1].text == "(" and toks[i - 2].kind == "id" and toks[i - 2].text.startswith("atomic")):
        return False
    if i + 1 >= n or toks[i + 1].kind != "id" or not (VIEW.match(toks[i + 1].text) or toks[i + 1].text in arrays):
        return False
    j, got = i + 2, 0
    while j < n and toks[j].kind == "punct" and toks[j].text == "[":
        got += 1
        j = pairs[j] + 1
    return got == arrays.get(toks[i + 1].text, 1) and j < n and toks[j].text == ","


def _call_of(toks: list[Tok], pairs: dict[int, int], close: int) -> str | None:
    """The name of the function whose call's `)` is at `close`, if any."""
    open_ = pairs.get(close)
    if open_ is None or open_ == 0 or toks[open_ - 1].kind != "id":
        return None
    return toks[open_ - 1].text


# what NVRTC may be given: one body (ir_exposure's MAX_IMPL_CHARS, 20k) and all of a plan's bodies together, each op's
# counted (an `impl` edit on a pattern puts its body into every op it matches). NVRTC's time grows with the
# code: on a busy 2-core host the 1B MLP's megakernel took 1-1.4 s, 5-6 s with one 20k-character body of
# straight-line arithmetic, 14-21 s with two (bench/results/impl_compile_cost.json); nesting 9,000 parentheses
# or braces deep, or 4,000 nested ?:, under 2 s. The compile itself runs in a process of its own under a time
# limit (cuda/nvrtc.py IMPL_COMPILE_TIMEOUT_S, 60 s).
MAX_IMPL_TOTAL_CHARS = 40_000


def impl_size_problem(impls: dict[str, str]) -> str | None:
    """Why these bodies together are too much code for one compile, or None."""
    total = sum(len(c) for c in impls.values() if isinstance(c, str))
    if total > MAX_IMPL_TOTAL_CHARS:
        return (f"the impl bodies are {total} characters together ({len(impls)} ops, each op's body counted: an "
                f"impl on a pattern copies its body into every op it matches); the limit is {MAX_IMPL_TOTAL_CHARS} "
                "for the whole IR; `unimpl` some ops, or shorten the bodies")
    return None


def own_name_problem(code: str, names: frozenset[str]) -> str | None:
    """Why a body names one of `names` (the generated source's file-scope names) that the contract does
    not give it, or None."""
    try:
        _check(code, names)
    except ImplBodyError as e:
        return str(e)
    return None


@lru_cache(maxsize=512)
def impl_code_problem(code: str) -> str | None:
    """Why an impl body may not go into the megakernel, or None (the rules that need no source; codegen
    checks the generated source's own names on top, through emit_body)."""
    try:
        _check(code)
    except ImplBodyError as e:
        return str(e)
    return None


def emit_body(code: str, own_names: frozenset[str] = frozenset()) -> str:
    """The body as the megakernel gets it: its checked tokens, canonically spelled, one space apart,
    body line k on line k; each subscript of an array it declares (and of the shapes) bounds-checked
    through mk_ix (MK_IMPL_FID stands for the function's id, which codegen fills in), block_sum called
    as mk_block_sum (which checks that `red` has a float per warp). Raises ImplBodyError where
    impl_code_problem gives a reason, or where the body names one of `own_names` (the generated
    source's file-scope names) that the contract does not give it."""
    body = _check(code, own_names)
    pairs = _match(body.toks)
    lines: list[list[str]] = [[] for _ in range(max((t.line for t in body.toks), default=1))]
    for line, text in _emit(body, pairs, 0, len(body.toks)):
        lines[line - 1].append(text)
    return "\n".join(" ".join(words) for words in lines)


def _emit(body: Body, pairs: dict[int, int], a: int, b: int) -> list[tuple[int, str]]:
    toks = body.toks
    out: list[tuple[int, str]] = []
    i = a
    while i < b:
        t = toks[i]
        if t.kind == "id" and t.text == "block_sum":
            out.append((t.line, "mk_block_sum"))
            i += 1
            continue
        if t.kind == "id" and (t.text in body.arrays or SHAPE.match(t.text)) and i not in body.declarators \
                and i + 1 < b and toks[i + 1].kind == "punct" and toks[i + 1].text == "[":
            out.append((t.line, t.text))
            j, k = i + 1, 0
            while j < b and toks[j].kind == "punct" and toks[j].text == "[":
                close = pairs[j]
                inner = " ".join(text for _, text in _emit(body, pairs, j + 1, close))
                ext = f"sizeof ( {t.text}{' [ 0 ]' * k} ) / sizeof ( {t.text}{' [ 0 ]' * (k + 1)} )"
                out.append((toks[j].line, f"[ mk_ix ( {inner} , {ext} , MK_IMPL_FID ) ]"))
                j, k = close + 1, k + 1
            i = j
            continue
        out.append((t.line, t.text))
        i += 1
    return out


# -- what codegen adds around bodies -------------------------------------------------------

# faults: what an index was out of (MK_FAULT_WHAT[k]), which impl function, the index
FAULT_WHAT = {1: "out (outside the task's tile)", 2: "an input (outside the tensor)", 3: "sm (outside the shared "
              "memory the contract gives)", 4: "an array the body declares (outside its extent)"}

PREAMBLE = """\
// impl bodies (compiler/impl_guard.py): a body reaches memory only through these views, and every
// index is checked; one out of range is not performed, and the first is recorded for the runtime:
// mk_impl_fault = {what (1 out, 2 an input, 3 sm, 4 a body's array), impl function id, index}
__device__ unsigned long long mk_impl_fault[3];
__device__ unsigned long long mk_impl_sink[2];     // where a refused write lands
__device__ __noinline__ void mk_impl_fault_at(unsigned what, int fid, long long i) {
  if (atomicCAS(&mk_impl_fault[0], 0ull, (unsigned long long)what) == 0ull) {
    mk_impl_fault[1] = (unsigned long long)fid;
    mk_impl_fault[2] = (unsigned long long)i;
  }
}
__device__ __forceinline__ long long mk_ix(long long i, unsigned long long n, int fid) {
  if ((unsigned long long)i >= n) { mk_impl_fault_at(4, fid, i); return 0; }
  return i;
}
template <typename E, unsigned long long N> struct MkIn {       // an input: read-only, within the tensor
  const E* p_; int fid_;
  __device__ __forceinline__ E operator[](long long i) const {
    if ((unsigned long long)i >= N) { mk_impl_fault_at(2, fid_, i); return E(0); }
    return p_[i];
  }
};
// the output: writable within the task's tile, [lo, hi) along the tile axis (INNER elements apart,
// DIM of them), every other axis whole
template <typename E, unsigned long long N, unsigned long long INNER, unsigned long long DIM> struct MkOut {
  E* p_; long long lo_, hi_; int fid_;
  __device__ __forceinline__ E& operator[](long long i) const {
    const unsigned long long u = (unsigned long long)i;
    long long c = 0;
    if (u < N) c = (N <= 0xffffffffull) ? (long long)(((unsigned)u / (unsigned)INNER) % (unsigned)DIM)
                                        : (long long)((u / INNER) % DIM);
    if (u >= N || c < lo_ || c >= hi_) { mk_impl_fault_at(1, fid_, i); return *(E*)mk_impl_sink; }
    return p_[i];
  }
};
template <unsigned long long N> struct MkSm {                   // the contract's shared memory, as floats
  float* p_; int fid_;
  __device__ __forceinline__ float& operator[](long long i) const {
    if ((unsigned long long)i >= N) { mk_impl_fault_at(3, fid_, i); return *(float*)mk_impl_sink; }
    return p_[i];
  }
};
template <int N> __device__ __forceinline__ float mk_block_sum(float v, float (&red)[N]) {
  static_assert(N >= @WARPS@, "block_sum(v, red): red needs a float per warp (@WARPS@)");
  return block_sum(v, red);
}
"""


def file_scope_names(source: str) -> frozenset[str]:
    """The names the generated source declares at file scope (macros, functions, variables, types),
    read off its lines that start in column 0: what a body could reach besides the contract's."""
    names = set()
    for line in source.splitlines():
        if not line or line[0] in " \t}/":
            continue
        m = re.match(r"#\s*define\s+(\w+)", line)
        if m:
            names.add(m.group(1))
            continue
        if line.startswith("#"):
            continue
        m = re.search(r"\b(?:struct|class|union|enum)\s+(\w+)", line)
        if m:
            names.add(m.group(1))
        head = re.split(r"[(\[=;{]", re.sub(r"template\s*<[^>]*>", "", line), maxsplit=1)[0]
        words = re.findall(r"[A-Za-z_]\w*", head)
        if words:
            names.add(words[-1])
    return frozenset(names)


_DIAG = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning|remark|note)\b")


def compile_log_for_agent(log: str, source: str, name: str = "megakernel.cu", max_chars: int = 3000) -> str:
    """NVRTC's log, as the agent may see it: only diagnostics located in the program's own source
    `name` (an included or #line-renamed file's are dropped whole, with the source lines NVRTC echoes
    under them), a line inside an impl body named as that body's line, capped at `max_chars`."""
    bodies = _body_ranges(source)
    kept: list[str] = []
    dropped = 0
    block: list[str] | None = None
    for line in log.splitlines():
        m = _DIAG.match(line)
        if m:
            if m.group("file") != name:
                dropped += 1
                block = None
                continue
            block = [line + _where(int(m.group("line")), bodies)]
            kept.append(block)  # type: ignore[arg-type]
            continue
        if block is not None:
            block.append(line)
    text = "\n".join("\n".join(b) for b in kept).strip()  # type: ignore[arg-type]
    if dropped:
        text += (f"\n({dropped} diagnostic(s) located outside the megakernel's own source not shown)")
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... ({len(text) - max_chars} more characters)"
    return text.strip() or "NVRTC gave no diagnostic located in the megakernel's source"


def _body_ranges(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, op) of each impl body in the generated source (1-based)."""
    out, start, op = [], None, None
    for k, line in enumerate(source.splitlines(), 1):
        m = re.match(r"\s*// <<< impl (\S+)", line)
        if m:
            start, op = k + 1, m.group(1)
        elif start is not None and re.match(r"\s*// >>> impl ", line):
            out.append((start, k - 1, op))
            start = None
    return out


def _where(line: int, bodies: list[tuple[int, int, str]]) -> str:
    for a, b, op in bodies:
        if a <= line <= b:
            return f"  [impl {op}, line {line - a + 1} of your body]"
    return ""


__all__ = ["normalize", "impl_code_problem", "emit_body", "ImplBodyError", "PREAMBLE", "FAULT_WHAT",
           "file_scope_names", "compile_log_for_agent", "Tok", "own_name_problem", "impl_size_problem",
           "MAX_IMPL_TOTAL_CHARS"]
