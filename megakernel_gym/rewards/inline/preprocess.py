"""The host source read as the C preprocessor reads it: comments out, directives and macros
(#define, function-like and ##), tokens, and the top-level functions found by their braces.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


from megakernel_gym.cuda.source_rules import SourceRefused
from megakernel_gym.cuda.source_rules import source_rules as _source_rules
from megakernel_gym.cuda.source_rules import strip_comments as _strip_comments  # noqa: F401  (inline's name for it)
from megakernel_gym.rewards.inline.headers import _FLOAT, _INT, _MATH
from megakernel_gym.rewards.inline.subset import Unsupported


def source_rules(src: str) -> None:
    """cuda.source_rules, refused as host code the judge cannot take (Unsupported)."""
    try:
        _source_rules(src)
    except SourceRefused as e:
        raise Unsupported(str(e)) from None


# ---------------------------------------------------------------------------------------
# source text: comments, directives, top-level functions


@dataclass
class Macro:
    params: list[str] | None
    body: str
    at: int = -1      # where its #define is in its source (-1: the headers')


def macros_before(defined: dict[str, Macro], at: int, base: dict[str, Macro]) -> dict[str, Macro]:
    """The macros a C++ compiler applies at offset `at` of one source: `base` (the headers'), then those the same
    source defines above it. A macro acts only below its #define and in its own translation unit (cpp_sources and
    cuda_sources are two): red team 16's #define after a host function, or in cpp_sources, changed what the judge
    ran and not what C++ builds."""
    return {**base, **{k: m for k, m in defined.items() if m.at < at}}


# The numeric macros torch's headers bring into host code (<cmath>, <cfloat>, <climits>), from the stubs
# the device code gets; INFINITY and NAN are named values (their stub definitions are device intrinsics).
_HOST_MACROS = {m.group(1): Macro(None, m.group(2).strip())
                for m in re.finditer(r"^#define (\w+) (.+)$", _MATH + _FLOAT + _INT, re.M)
                if m.group(1) not in ("INFINITY", "NAN", "HUGE_VALF")}


def _directives(src: str) -> tuple[str, dict[str, Macro]]:
    """Preprocessor lines blanked out of the text (line numbers kept), #defines collected (each with the offset
    in `src` where it is defined: `Macro.at`, for macros_before)."""
    lines = src.split("\n")
    macros: dict[str, Macro] = {}
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            full, k = line, i
            while full.endswith("\\") and k + 1 < len(lines):
                k += 1
                full = full[:-1] + " " + lines[k]
            m = re.match(r"\s*#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)$", full)
            if m:
                params = [p.strip() for p in m.group(3).split(",")] if m.group(2) is not None else None
                if params == [""]:
                    params = []
                macros.pop(m.group(1), None)    # (a redefinition: where it is defined now)
                macros[m.group(1)] = Macro(params, m.group(4).strip(), sum(len(lines[x]) + 1 for x in range(i)))
            elif re.match(r"\s*#\s*(if|ifdef|ifndef|else|elif|endif|undef)\b", full):
                if not re.match(r"\s*#\s*pragma", full):
                    raise Unsupported("conditional compilation (#if) in the source")
            out.extend(" " * len(lines[x]) for x in range(i, k + 1))   # same length: positions hold
            i = k + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out), macros


def _match_brace(text: str, i: int, open_c: str = "{", close_c: str = "}") -> int:
    """Index just past the bracket that closes the one at text[i]."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise Unsupported("unbalanced brackets")


_DEF_HEAD = re.compile(r"(?:^|(?<=[;}{\n]))([ \t]*(?:template\s*<[^{};]*>\s*)?(?:[\w:<>,&*\s]|__launch_bounds__\s*\([^)]*\)|"
                       r"\"C\")*?\b(\w+)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*(?:const\s*)?)\{", re.S)


@dataclass
class TopFunction:
    name: str
    head: str        # everything before the body's brace: return type, qualifiers, parameters
    ret: str         # the part of head before the name
    params: str
    body: str
    start: int
    end: int

    @property
    def device(self) -> bool:
        return bool(re.search(r"\b(__global__|__device__)\b", self.head))

    @property
    def host(self) -> bool:
        return not self.device or bool(re.search(r"\b__host__\b", self.head))


def top_level_functions(code: str) -> list[TopFunction]:
    """Function definitions at namespace scope (not inside structs or other bodies)."""
    found, pos = [], 0
    depth_ok = _namespace_depths(code)
    while True:
        m = _DEF_HEAD.search(code, pos)
        if not m:
            break
        brace = m.end() - 1
        end = _match_brace(code, brace)
        name = m.group(2)
        if depth_ok(m.start(1)) and name not in ("if", "for", "while", "switch", "return", "sizeof"):
            found.append(TopFunction(name, m.group(1), code[m.start(1):m.start(2)], m.group(3),
                                     code[brace + 1:end - 1], m.start(1), end))
            pos = end
        else:
            pos = brace + 1
    return found


def _namespace_depths(code: str) -> Callable[[int], bool]:
    """Whether a position is at namespace scope: outside every brace but `namespace {...}` ones."""
    inside: list[tuple[int, int]] = []
    for m in re.finditer(r"\b(struct|class|union|enum)\b[^;{]*\{", code):
        inside.append((m.end() - 1, _match_brace(code, m.end() - 1)))
    return lambda p: not any(a <= p < b for a, b in inside)


# ---------------------------------------------------------------------------------------
# tokens and the host-code parser


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\])*")
  | (?P<chr>'(?:\\.|[^'\\])')
  | (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|0[bB][01]+[uUlL]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFlLuU]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op><<<|>>>|<<=|>>=|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|[-+*/%<>=!~&|^?:;,.(){}\[\]#])
""", re.X)


def tokenize(text: str) -> list[str]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Unsupported(f"unexpected character {text[pos]!r} in host code")
        if m.lastgroup != "ws":
            toks.append(m.group(0))
        pos = m.end()
    return toks


def _paste(toks: list[str], macro: str) -> list[str]:
    """`a ## b` joined into one token, as the preprocessor does (the result must be one token)."""
    out: list[str] = []
    k = 0
    while k < len(toks):
        if toks[k] == "#" and k + 1 < len(toks) and toks[k + 1] == "#":
            right = toks[k + 2] if k + 2 < len(toks) else ""
            joined = (out.pop() if out else "") + right
            if joined:
                pasted = tokenize(joined)
                if len(pasted) != 1:
                    raise Unsupported(f"macro {macro} pastes {joined!r}, which is not one token")
                out.append(pasted[0])
            k += 3
            continue
        out.append(toks[k])
        k += 1
    return out


# tokens a source's macros may expand to in one place: red team 16's 403 characters of nested macros made 10^6
# (12 s, 400 MB of the worker), ten times more a level
MAX_EXPANDED_TOKENS = 100_000


def expand_macros(toks: list[str], macros: dict[str, Macro], depth: int = 0) -> list[str]:
    if depth > 20:
        raise Unsupported("macros nest too deep")
    if len(toks) > MAX_EXPANDED_TOKENS:
        raise Unsupported(f"macros that expand to more than {MAX_EXPANDED_TOKENS:,} tokens")
    out, i, changed = [], 0, False
    while i < len(toks):
        t = toks[i]
        mac = macros.get(t)
        if mac is None:
            out.append(t)
            i += 1
            continue
        if mac.params is None:
            out.extend(_paste(tokenize(mac.body), t))
            i += 1
            changed = True
            continue
        if i + 1 >= len(toks) or toks[i + 1] != "(":
            out.append(t)
            i += 1
            continue
        args, cur, d, j = [], [], 0, i + 2
        while j < len(toks):
            tk = toks[j]
            if tk in "([{":
                d += 1
            elif tk in ")]}":
                if d == 0 and tk == ")":
                    break
                d -= 1
            if tk == "," and d == 0:
                args.append(cur)
                cur = []
            else:
                cur.append(tk)
            j += 1
        args.append(cur)
        binding = dict(zip(mac.params, args))
        body, btoks = [], tokenize(mac.body)
        k = 0
        while k < len(btoks):
            bt = btoks[k]
            if bt == "#" and k + 1 < len(btoks) and btoks[k + 1] in binding and not (body and body[-1] == "#"):
                text = " ".join(binding[btoks[k + 1]]).replace("\\", "\\\\").replace('"', '\\"')
                body.append(f'"{text}"')
                k += 2
                continue
            body.extend(binding.get(bt, [bt]))
            k += 1
        out.extend(_paste(body, t))
        i = j + 1
        changed = True
    return expand_macros(out, macros, depth + 1) if changed else out


def kernel_names(cuda_sources) -> set[str]:
    """The `__global__` function names of load_inline CUDA sources (the judge's own-kernel list)."""
    try:
        text = _strip_comments(_joined(cuda_sources))
    except TypeError:
        return set()
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", text)
    return {m.group(1) for m in re.finditer(r"__global__[^;{(]*?\b(\w+)\s*\(", text)}


def _joined(src) -> str:
    if src is None:
        return ""
    if isinstance(src, (list, tuple)):
        return "\n".join(str(s) for s in src)
    if not isinstance(src, str):
        raise TypeError("load_inline: sources must be a string or a list of strings")
    return src
