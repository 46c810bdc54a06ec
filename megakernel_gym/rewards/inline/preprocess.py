"""The host source read as the C preprocessor reads it: comments out, directives and macros
(#define, function-like and ##), tokens, and the top-level functions found by their braces.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


from megakernel_gym.rewards.inline.headers import _FLOAT, _INT, _MATH
from megakernel_gym.rewards.inline.subset import Unsupported


# ---------------------------------------------------------------------------------------
# source text: comments, directives, top-level functions


def _strip_comments(src: str) -> str:
    """Comments become spaces (newlines kept, so line numbers hold); strings are left alone."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass
class Macro:
    params: list[str] | None
    body: str


# The numeric macros torch's headers bring into host code (<cmath>, <cfloat>, <climits>), from the stubs
# the device code gets; INFINITY and NAN are named values (their stub definitions are device intrinsics).
_HOST_MACROS = {m.group(1): Macro(None, m.group(2).strip())
                for m in re.finditer(r"^#define (\w+) (.+)$", _MATH + _FLOAT + _INT, re.M)
                if m.group(1) not in ("INFINITY", "NAN", "HUGE_VALF")}


def _directives(src: str) -> tuple[str, dict[str, Macro]]:
    """Preprocessor lines blanked out of the text (line numbers kept), #defines collected."""
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
                macros[m.group(1)] = Macro(params, m.group(4).strip())
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


def expand_macros(toks: list[str], macros: dict[str, Macro], depth: int = 0) -> list[str]:
    if depth > 20:
        raise Unsupported("macros nest too deep")
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
